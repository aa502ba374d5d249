"""What a team gets in the cluster and how it behaves: the same scenarios and assertions on
the simulated cluster and on the real control plane (etcd, kube-apiserver, Kueue, KWOK)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from jobs import selectors as job_selectors
from portal.kube import ObjectRef, gateway
from portal.models import SsoIdentity
from tenants import cluster_selectors, reconcile, services
from tenants.models import QuotaGrant
from tenants.queueing.kueue import KUEUE
from tests.contract.scenarios import (
    condition,
    existing,
    is_admitted,
    nominal,
    probe_job,
    queue_usage,
    team_objects,
    waits_for_quota,
    workload_of,
)
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


# --- Scenarios ---------------------------------------------------------------------------------


def test_provisioning_a_team_creates_exactly_its_objects_and_kueue_accepts_them(cluster, site):
    team = site.team("vision", gpus=4)
    lead = team.memberships.get().user

    assert team_objects(team.slug) == {
        ("Namespace", team.slug, None), ("ResourceQuota", "gpu-portal", team.slug), ("LimitRange", "gpu-portal", team.slug),
        ("NetworkPolicy", "gpu-portal-default-deny-ingress", team.slug),
        ("NetworkPolicy", "gpu-portal-default-deny-egress", team.slug), ("NetworkPolicy", "gpu-portal-allow-portal", team.slug),
        ("NetworkPolicy", "gpu-portal-allow-ingress-controller", team.slug), ("RoleBinding", "gpu-portal-members", team.slug),
        ("ClusterQueue", team.slug, None), ("LocalQueue", "default", team.slug),
        ("LocalQueue", f"person-{lead.pk}", team.slug),  # each member's own (admission fair sharing)
    }
    cq = existing(ObjectRef(KUEUE, "ClusterQueue", team.slug))
    assert cq["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert nominal(cq, site.flavor.slug) == "4"
    cluster.wait_for(
        lambda: condition(gateway().get(ObjectRef(KUEUE, "ClusterQueue", team.slug)), "Active").get("status") == "True",
        what="Kueue to mark the ClusterQueue active",
    )
    team.refresh_from_db()
    assert team.sync_state == "in_sync" and team.synced_at is not None


def test_approving_shrinking_and_expiring_grants_move_nominal_quota(
    cluster, site, django_capture_on_commit_callbacks,
):
    team = site.team("nlp", gpus=2)
    lead = team.memberships.get().user

    def quota() -> tuple[str, str]:
        cq = existing(ObjectRef(KUEUE, "ClusterQueue", team.slug))
        return nominal(cq, site.flavor.slug), cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].get(
            "borrowingLimit", "")

    assert quota() == ("2", "")  # no borrowing limit: it may borrow what the cohort leaves idle
    rq = existing(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))
    assert not [key for key in rq["spec"]["hard"] if "nvidia.com" in key]  # its queue bounds its GPUs
    site.grant(team, lead, 3, ends_on=timezone.localdate() + dt.timedelta(days=5))
    assert quota()[0] == "5"
    site.grant(team, lead, -1)
    assert quota()[0] == "4"

    QuotaGrant.objects.filter(team=team, valid_until__isnull=False).update(valid_until=timezone.now() - dt.timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        services.quota_grants_expire()
    assert quota()[0] == "1"

    team.may_borrow = False
    team.save()
    reconcile.team_reconcile(team_id=team.pk)
    assert quota() == ("1", "0")


def test_a_reservation_becomes_quota_at_its_start_and_goes_at_its_end(cluster, site, django_capture_on_commit_callbacks):
    # Issue 27 §4: +3 reserved for a later window, on top of the team's 2.
    team = site.team("deadline", gpus=2)
    lead = team.memberships.get().user
    starts_on = timezone.localdate() + dt.timedelta(days=10)
    with django_capture_on_commit_callbacks(execute=True):
        reservation = services.quota_request_create(
            requester=lead, team=team, lines=[services.LineInput(flavor=site.flavor, units=3)],
            justification="the deadline", starts_on=starts_on, ends_on=starts_on + dt.timedelta(days=4))
        services.quota_request_approve(quota_request=reservation, approver=site.admin)
        services.quota_grants_expire()

    def quota() -> str:
        return nominal(existing(ObjectRef(KUEUE, "ClusterQueue", team.slug)), site.flavor.slug)

    assert quota() == "2"  # reserved, not yet begun
    # Its first day comes (the grant's window moved to now: the cluster's clock is today's).
    now = timezone.now()
    QuotaGrant.objects.filter(request=reservation).update(valid_from=now - dt.timedelta(seconds=1),
                                                          valid_until=now + dt.timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.quota_grants_expire().begun == 1
    assert quota() == "5"
    # And its last day ends.
    QuotaGrant.objects.filter(request=reservation).update(valid_until=timezone.now() - dt.timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.quota_grants_expire().ended == 1
    assert quota() == "2"


def test_a_queued_job_is_admitted_within_quota_borrows_idle_quota_and_otherwise_waits(cluster, site):
    vision = site.team("vision", gpus=2)
    site.team("speech", gpus=2)
    ns = vision.slug

    gateway().apply(probe_job(ns, "first", gpus=2))
    cluster.wait_for(lambda: is_admitted(ns, "first"), what="the first job to be admitted")
    gateway().apply(probe_job(ns, "borrower", gpus=2))
    cluster.wait_for(lambda: is_admitted(ns, "borrower"), what="the second job to borrow speech's idle quota")
    assert cluster.wait_for(lambda: queue_usage(ns, site.flavor.slug) == (4, 2), what="usage 4 with 2 borrowed")

    gateway().apply(probe_job(ns, "too-much", gpus=1))
    message = cluster.wait_for(lambda: waits_for_quota(ns, "too-much"), what="the third job to wait for quota")
    assert "nvidia.com/gpu" in message and site.flavor.slug in message
    assert existing(ObjectRef("batch/v1", "Job", "too-much", ns))["spec"]["suspend"] is True


def test_a_lender_reclaiming_its_quota_preempts_the_borrower(cluster, site):
    vision = site.team("vision", gpus=2)
    speech = site.team("speech", gpus=2)

    gateway().apply(probe_job(vision.slug, "own", gpus=2))
    gateway().apply(probe_job(vision.slug, "borrowed", gpus=2, priority="gpu-portal-low"))
    cluster.wait_for(lambda: is_admitted(vision.slug, "own") and is_admitted(vision.slug, "borrowed"),
                     what="vision to run on 4 GPUs")

    gateway().apply(probe_job(speech.slug, "reclaim", gpus=2))
    cluster.wait_for(lambda: is_admitted(speech.slug, "reclaim"), what="speech to get its quota back")
    evicted = cluster.wait_for(lambda: condition(workload_of(vision.slug, "borrowed"), "Evicted"),
                               what="the borrower to be preempted")
    assert evicted["reason"] == "Preempted"
    assert is_admitted(vision.slug, "own")
    cluster.wait_for(lambda: queue_usage(vision.slug, site.flavor.slug) == (2, 0), what="vision back on its own quota")


def test_a_job_runs_to_success_on_a_gpu_node_of_its_flavor(cluster, site):
    team = site.team("recsys", gpus=1)
    gateway().apply(probe_job(team.slug, "short", gpus=1, run="2"))

    def complete() -> bool:
        job = gateway().get(ObjectRef("batch/v1", "Job", "short", team.slug)) or {}
        return any(c["type"] == "Complete" and c["status"] == "True" for c in (job.get("status") or {}).get("conditions", []))

    cluster.wait_for(complete, what="the job to complete", timeout=90)
    pods = gateway().list("v1", "Pod", namespace=team.slug)[0]
    assert pods and pods[0]["spec"]["nodeSelector"] == {"gpu-portal.io/test-flavor": site.flavor.slug}
    node = existing(ObjectRef("v1", "Node", pods[0]["spec"]["nodeName"]))
    assert node["metadata"]["labels"]["gpu-portal.io/test-flavor"] == site.flavor.slug
    cluster.wait_for(lambda: queue_usage(team.slug, site.flavor.slug) == (0, 0), what="the finished job to release its quota")


def test_the_periodic_pass_repairs_drift_and_then_writes_nothing(cluster, site):
    team = site.team("drift", gpus=2)
    rq = existing(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))
    gateway().apply({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "gpu-portal", "namespace": team.slug},
                     "spec": {"hard": {**rq["spec"]["hard"], "pods": "0"}}}, field_manager="someone-by-hand")
    gateway().delete(ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "gpu-portal-default-deny-ingress", team.slug))

    repaired = reconcile.cluster_reconcile()

    assert f"ResourceQuota {team.slug}/gpu-portal" in repaired.applied
    assert f"NetworkPolicy {team.slug}/gpu-portal-default-deny-ingress" in repaired.applied
    assert existing(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))["spec"]["hard"]["pods"] == "100"
    assert not repaired.errors
    again = reconcile.cluster_reconcile()
    assert (again.applied, again.errors) == ([], {})


def test_the_watchers_store_follows_the_cluster_and_its_pass_repairs_drift_then_writes_nothing(
    cluster, site, transactional_db,  # the store's watch threads read the simulated cluster's tables
):
    team = site.team("stored", gpus=2)
    quota = ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug)
    policy = ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "gpu-portal-default-deny-ingress", team.slug)
    wanted_pods = existing(quota)["spec"]["hard"]["pods"]

    def held() -> dict:
        return store.snapshot() or {}

    def stored_gpus() -> str | None:
        stored = held().get(quota)
        return stored["spec"]["hard"]["pods"] if stored else None

    store = reconcile.owned_store(watch_seconds=30).start()
    try:
        assert store.wait_listed(timeout=60)
        cluster.wait_for(lambda: stored_gpus() == wanted_pods and policy in held(), what="the store to hold the team")
        gateway().apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-portal", "namespace": team.slug},
                         "spec": {"hard": {**existing(quota)["spec"]["hard"], "pods": "0"}}},
                        field_manager="someone-by-hand")
        gateway().delete(policy)
        cluster.wait_for(lambda: stored_gpus() == "0" and policy not in held(), what="the store to see the drift")

        repaired = reconcile.cluster_reconcile(store=store)

        assert repaired.reads == 0 and team.slug not in repaired.errors
        assert {str(quota), str(policy)} <= set(repaired.applied)
        assert existing(quota)["spec"]["hard"]["pods"] == wanted_pods
        cluster.wait_for(lambda: stored_gpus() == wanted_pods and policy in held(), what="the store to see the repair")
        again = reconcile.cluster_reconcile(store=store)
        assert [ref for ref in again.applied + again.deleted if team.slug in ref] == []
        assert (again.reads, again.confirmed) == (0, 0) and team.slug not in again.errors
    finally:
        store.stop()


def test_the_members_role_binding_names_sso_members_by_subject_and_no_local_account(
    cluster, site, django_capture_on_commit_callbacks,
):
    team = site.team("rbac")  # its lead is a local account: no cluster identity
    binding = ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-members", team.slug)
    assert existing(binding).get("subjects", []) == []
    sso = UserFactory.create(username=cluster.unique("sso-member"))
    SsoIdentity.objects.create(user=sso, issuer="https://id.example.org", subject="0f9e8d7c-6b5a")
    with django_capture_on_commit_callbacks(execute=True):
        services.membership_add(actor=site.admin, team=team, user=sso)

    assert existing(binding)["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:0f9e8d7c-6b5a"},
    ]
    role = django_settings.PORTAL_MEMBER_CLUSTER_ROLE  # `view`, or the chart's member role (test_chart_contract.py)
    assert existing(binding)["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
    again = reconcile.cluster_reconcile()
    assert (again.applied, again.errors) == ([], {})


def test_deleting_a_team_leaves_no_object_behind(cluster, site, django_capture_on_commit_callbacks):
    team = site.team("gone", gpus=1)
    gateway().apply(probe_job(team.slug, "running", gpus=1))
    cluster.wait_for(lambda: is_admitted(team.slug, "running"), what="a job to run before the team goes")
    slug, uid = team.slug, str(team.uid)

    with django_capture_on_commit_callbacks(execute=False):
        services.team_delete(actor=site.admin, team=team)
    cluster.wait_for(lambda: reconcile.team_teardown(slug=slug, uid=uid), what="the namespace and queue to be gone", timeout=90)

    assert team_objects(slug) == set()
    assert gateway().get(ObjectRef(KUEUE, "ClusterQueue", slug)) is None
    assert gateway().get(ObjectRef("v1", "Namespace", slug)) is None


# --- What the portal did not create ------------------------------------------------------------


def refusal(kind: str, name: str) -> str:
    return (f"The {kind} {name} already exists in the cluster and was not created by the portal for this team, "
            "so the portal will not adopt it. Remove it, or set PORTAL_NAMESPACE_PREFIX.")


def test_a_namespace_the_portal_did_not_create_is_never_adopted_changed_or_deleted(
    cluster, site, django_capture_on_commit_callbacks,
):
    name = cluster.unique("monitoring")
    gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": "observability"}}},
                    field_manager="someone-by-hand")
    gateway().apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dashboards", "namespace": name},
                     "data": {"gpu.json": "{}"}}, field_manager="someone-by-hand")
    namespace_before = existing(ObjectRef("v1", "Namespace", name))

    with django_capture_on_commit_callbacks(execute=True):
        team = services.team_create(actor=site.admin, slug=name, name="Monitoring")
    team.refresh_from_db()
    passes = [reconcile.cluster_reconcile(), reconcile.cluster_reconcile()]

    assert team.sync_state == "error" and team.sync_error == refusal("namespace", name)
    assert cluster_selectors.team_cluster_picture(team=team).error == refusal("namespace", name)
    assert all(p.errors[name] == refusal("namespace", name) for p in passes)
    assert not [ref for p in passes for ref in p.applied + p.deleted if name in ref]
    assert team_objects(name) == set()
    assert gateway().get(ObjectRef(KUEUE, "ClusterQueue", name)) is None
    namespace = existing(ObjectRef("v1", "Namespace", name))
    assert namespace["metadata"]["labels"] == namespace_before["metadata"]["labels"]
    assert "gpu-portal.io/team-uid" not in (namespace["metadata"].get("annotations") or {})

    uid = str(team.uid)
    with django_capture_on_commit_callbacks(execute=False):
        services.team_delete(actor=site.admin, team=team)
    assert reconcile.team_teardown(slug=name, uid=uid)
    reconcile.cluster_reconcile()

    assert gateway().get(ObjectRef("v1", "Namespace", name)) is not None
    assert existing(ObjectRef("v1", "ConfigMap", "dashboards", name))["data"] == {"gpu.json": "{}"}


def test_a_cluster_queue_the_portal_did_not_create_stops_the_team_before_anything_is_applied(
    cluster, site, django_capture_on_commit_callbacks,
):
    name = cluster.unique("shared")
    gateway().apply({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
                     "spec": {"namespaceSelector": {"matchLabels": {"team": "shared"}}, "resourceGroups": []}},
                    field_manager="someone-by-hand")

    with django_capture_on_commit_callbacks(execute=True):
        team = services.team_create(actor=site.admin, slug=name, name="Shared")
    team.refresh_from_db()

    assert team.sync_error == refusal("ClusterQueue", name)
    assert gateway().get(ObjectRef("v1", "Namespace", name)) is None
    assert "labels" not in existing(ObjectRef(KUEUE, "ClusterQueue", name))["metadata"]

    uid = str(team.uid)
    with django_capture_on_commit_callbacks(execute=False):
        services.team_delete(actor=site.admin, team=team)
    assert reconcile.team_teardown(slug=name, uid=uid)
    assert gateway().get(ObjectRef(KUEUE, "ClusterQueue", name)) is not None
    gateway().delete(ObjectRef(KUEUE, "ClusterQueue", name))


def test_a_namespace_left_by_a_deleted_team_is_not_adopted_by_a_new_team_of_the_same_slug(
    cluster, site, django_capture_on_commit_callbacks,
):
    old = site.team("reused")
    slug, old_uid = old.slug, str(old.uid)
    with django_capture_on_commit_callbacks(execute=False):  # the teardown is lost
        services.team_delete(actor=site.admin, team=old)

    with django_capture_on_commit_callbacks(execute=True):
        new = services.team_create(actor=site.admin, slug=slug, name="Reused")
    new.refresh_from_db()

    assert new.sync_error == refusal("namespace", slug)
    namespace = existing(ObjectRef("v1", "Namespace", slug))
    assert namespace["metadata"]["annotations"]["gpu-portal.io/team-uid"] == old_uid
    assert reconcile.team_teardown(slug=slug, uid=str(new.uid)) is True  # the new team's teardown may not take it either
    assert gateway().get(ObjectRef("v1", "Namespace", slug)) is not None

    # The periodic pass removes what the deleted team left, then provisions the new team.
    first = reconcile.cluster_reconcile()
    assert f"Namespace {slug}" in first.deleted and f"ClusterQueue {slug}" in first.deleted
    cluster.wait_for(lambda: gateway().get(ObjectRef("v1", "Namespace", slug)) is None
                     and gateway().get(ObjectRef(KUEUE, "ClusterQueue", slug)) is None,
                     what="the old namespace and queue to be gone", timeout=90)
    reconcile.cluster_reconcile()

    new.refresh_from_db()
    assert new.sync_state == "in_sync"
    for ref in (ObjectRef("v1", "Namespace", slug), ObjectRef(KUEUE, "ClusterQueue", slug)):
        assert existing(ref)["metadata"]["annotations"]["gpu-portal.io/team-uid"] == str(new.uid)


def test_the_launch_hint_counts_only_quota_other_teams_lend(cluster, site, django_capture_on_commit_callbacks):
    """A team that keeps its idle quota (lendingLimit 0) is not capacity another team may borrow."""
    borrower = site.team("borrower")
    keeper = site.team("keeper", gpus=4)
    with django_capture_on_commit_callbacks(execute=True):
        services.team_update(actor=site.admin, team=keeper, lends_idle=False)
    cluster.wait_for(lambda: "lendingLimit" in str(existing(
        ObjectRef(KUEUE, "ClusterQueue", keeper.slug))["spec"]), what="the keeper's queue to stop lending")

    hint = job_selectors.launch_hint(team=borrower, flavor=site.flavor, units=2)
    assert hint.lendable == 0
    assert not hint.would_borrow

    with django_capture_on_commit_callbacks(execute=True):
        services.team_update(actor=site.admin, team=keeper, lends_idle=True)
    cluster.wait_for(lambda: "lendingLimit" not in str(existing(
        ObjectRef(KUEUE, "ClusterQueue", keeper.slug))["spec"]), what="the keeper's queue to lend again")
    hint = job_selectors.launch_hint(team=borrower, flavor=site.flavor, units=2)
    assert hint.lendable == 4
    assert hint.would_borrow


def test_a_gpu_limit_the_portal_wrote_before_leaves_its_resource_quota_at_the_next_pass(cluster, site):
    """A site's quota from before, which limited GPUs under the portal's own field manager: the
    next pass takes the limit away (server-side apply drops what its manager no longer sets), once."""
    team = site.team("upgraded", gpus=2)
    ref = ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug)
    before = existing(ref)
    gateway().apply({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "gpu-portal", "namespace": team.slug,
                                  "labels": before["metadata"]["labels"], "annotations": before["metadata"]["annotations"]},
                     "spec": {"hard": {**before["spec"]["hard"], "requests.nvidia.com/gpu": "8"}}})
    assert existing(ref)["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert str(ref) in reconcile.cluster_reconcile().applied
    assert "requests.nvidia.com/gpu" not in existing(ref)["spec"]["hard"]
    assert str(ref) not in reconcile.cluster_reconcile().applied
