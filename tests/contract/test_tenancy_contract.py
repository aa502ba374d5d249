"""What a team gets in the cluster and how it behaves: the same scenarios and assertions on
the simulated cluster and on the real control plane (etcd, kube-apiserver, Kueue, KWOK)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from portal.kube import ObjectRef, gateway
from tenants import reconcile, services
from tenants.manifests import KUEUE
from tenants.models import Flavor, Membership, QuotaGrant
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

TEAM_KINDS = [("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange"), ("networking.k8s.io/v1", "NetworkPolicy"),
              ("rbac.authorization.k8s.io/v1", "RoleBinding"), (KUEUE, "ClusterQueue"), (KUEUE, "LocalQueue")]


@pytest.fixture
def site(cluster, django_capture_on_commit_callbacks):
    """An admin, a GPU flavor with a node to run on, and a helper to make provisioned teams."""
    admin = UserFactory(username="root", is_platform_admin=True)
    with django_capture_on_commit_callbacks(execute=True):
        flavor = services.flavor_save(actor=admin, flavor=Flavor(
            name=cluster.unique("H100"), slug=cluster.unique("h100"), resource_name="nvidia.com/gpu", gpu_model="H100",
            capacity_units=8, node_labels={"gpu-portal.io/test-flavor": cluster.unique("h100")},
        ))
    cluster.add_gpu_node(cluster.unique("gpu-node"), labels={"gpu-portal.io/test-flavor": flavor.slug},
                         allocatable={"nvidia.com/gpu": 8})

    class Site:
        def team(self, name: str, *, gpus: int = 0) -> Any:
            with django_capture_on_commit_callbacks(execute=True):
                team = services.team_create(actor=admin, slug=cluster.unique(name), name=name)
                lead = UserFactory(username=cluster.unique(f"{name}-lead"))
                MembershipFactory(team=team, user=lead, role=Membership.Role.LEAD)
                if gpus:
                    self.grant(team, lead, gpus)
            wait_for_quota_status(cluster, team.slug)
            team.refresh_from_db()
            return team

        def grant(self, team: Any, lead: Any, units: int, ends_on: dt.date | None = None) -> None:
            with django_capture_on_commit_callbacks(execute=True):
                qr = services.quota_request_create(
                    requester=lead, team=team, lines=[services.LineInput(flavor=flavor, units=units)],
                    justification="contract", ends_on=ends_on)
                services.quota_request_approve(quota_request=qr, approver=admin)

    site = Site()
    site.admin, site.flavor = admin, flavor
    return site


def wait_for_quota_status(cluster, namespace: str) -> None:
    """Pods are refused until a new namespace's ResourceQuota has status (real clusters)."""
    cluster.wait_for(lambda: (cluster.gateway.get(ObjectRef("v1", "ResourceQuota", "gpu-portal", namespace)) or {}).get("status", {}).get("hard"),
                     what=f"the ResourceQuota of {namespace} to get status")


def nominal(cq: dict[str, Any], flavor: str) -> str:
    for group in cq["spec"]["resourceGroups"]:
        for fq in group["flavors"]:
            if fq["name"] == flavor:
                return fq["resources"][0]["nominalQuota"]
    raise AssertionError(f"{flavor} not in {cq['metadata']['name']}")


def team_objects(slug: str) -> set[tuple[str, str, str | None]]:
    found = set()
    for api_version, kind in TEAM_KINDS:
        for item in gateway().list(api_version, kind, labels={"gpu-portal.io/team": slug})[0]:
            found.add((kind, item["metadata"]["name"], item["metadata"].get("namespace")))
    return found


def probe_job(namespace: str, name: str, *, gpus: int, priority: str = "gpu-portal-normal", run: str = "forever") -> dict[str, Any]:
    """A suspended Job for the team's LocalQueue that satisfies Pod Security `restricted`."""
    annotations = {"gpu-portal.io/simulated-run-seconds": "100000" if run == "forever" else run,
                   "kwok.gpu-portal.test/outcome": "Running" if run == "forever" else "Succeeded",
                   "kwok.gpu-portal.test/run-duration": "1s" if run == "forever" else f"{run}s"}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": priority}},
        "spec": {
            "suspend": True, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "main", "image": "busybox:1.36", "command": ["true"],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)},
                                      "limits": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)}},
                    }],
                },
            },
        },
    }


def workload_of(namespace: str, job: str) -> dict[str, Any] | None:
    for workload in gateway().list(KUEUE, "Workload", namespace=namespace)[0]:
        owners = workload["metadata"].get("ownerReferences", [])
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return workload
    return None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions", []):
        if cond["type"] == type_:
            return cond
    return {}


def is_admitted(namespace: str, job: str) -> bool:
    return condition(workload_of(namespace, job), "QuotaReserved").get("status") == "True" and \
        not (gateway().get(ObjectRef("batch/v1", "Job", job, namespace)) or {"spec": {"suspend": True}})["spec"].get("suspend")


def waits_for_quota(namespace: str, job: str) -> str:
    reserved = condition(workload_of(namespace, job), "QuotaReserved")
    return reserved.get("message", "") if reserved.get("status") == "False" and "insufficient unused quota" in reserved.get("message", "") else ""


def queue_usage(slug: str, flavor: str) -> tuple[int, int]:
    for row in reconcile.cluster_queue_usage(slugs=[slug]).get(slug, []):
        if row.flavor == flavor:
            return row.in_use, row.borrowed
    return 0, 0


# --- Scenarios ---------------------------------------------------------------------------------


def test_provisioning_a_team_creates_exactly_its_objects_and_kueue_accepts_them(cluster, site):
    team = site.team("vision", gpus=4)

    assert team_objects(team.slug) == {
        ("Namespace", team.slug, None), ("ResourceQuota", "gpu-portal", team.slug), ("LimitRange", "gpu-portal", team.slug),
        ("NetworkPolicy", "gpu-portal-default-deny-ingress", team.slug), ("RoleBinding", "gpu-portal-members", team.slug),
        ("ClusterQueue", team.slug, None), ("LocalQueue", "default", team.slug),
    }
    cq = gateway().get(ObjectRef(KUEUE, "ClusterQueue", team.slug))
    assert nominal(cq, site.flavor.slug) == "4"
    cluster.wait_for(lambda: condition(gateway().get(ObjectRef(KUEUE, "ClusterQueue", team.slug)), "Active").get("status") == "True",
                     what="Kueue to mark the ClusterQueue active")
    team.refresh_from_db()
    assert team.sync_state == "in_sync" and team.synced_at is not None


def test_approving_shrinking_and_expiring_grants_move_nominal_quota_and_the_backstop(cluster, site, django_capture_on_commit_callbacks):
    team = site.team("nlp", gpus=2)
    lead = team.memberships.get().user

    def quota() -> tuple[str, str]:
        cq = gateway().get(ObjectRef(KUEUE, "ClusterQueue", team.slug))
        rq = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))
        return nominal(cq, site.flavor.slug), rq["spec"]["hard"]["requests.nvidia.com/gpu"]

    assert quota() == ("2", "8")  # the backstop allows borrowing up to the flavor's capacity
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
    assert quota() == ("1", "1")


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
    assert gateway().get(ObjectRef("batch/v1", "Job", "too-much", ns))["spec"]["suspend"] is True


def test_a_lender_reclaiming_its_quota_preempts_the_borrower(cluster, site):
    vision = site.team("vision", gpus=2)
    speech = site.team("speech", gpus=2)

    gateway().apply(probe_job(vision.slug, "own", gpus=2))
    gateway().apply(probe_job(vision.slug, "borrowed", gpus=2, priority="gpu-portal-low"))
    cluster.wait_for(lambda: is_admitted(vision.slug, "own") and is_admitted(vision.slug, "borrowed"), what="vision to run on 4 GPUs")

    gateway().apply(probe_job(speech.slug, "reclaim", gpus=2))
    cluster.wait_for(lambda: is_admitted(speech.slug, "reclaim"), what="speech to get its quota back")
    evicted = cluster.wait_for(lambda: condition(workload_of(vision.slug, "borrowed"), "Evicted"), what="the borrower to be preempted")
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
    node = gateway().get(ObjectRef("v1", "Node", pods[0]["spec"]["nodeName"]))
    assert node["metadata"]["labels"]["gpu-portal.io/test-flavor"] == site.flavor.slug
    cluster.wait_for(lambda: queue_usage(team.slug, site.flavor.slug) == (0, 0), what="the finished job to release its quota")


def test_the_periodic_pass_repairs_drift_and_then_writes_nothing(cluster, site):
    team = site.team("drift", gpus=2)
    rq = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))
    gateway().apply({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "gpu-portal", "namespace": team.slug},
                     "spec": {"hard": {**rq["spec"]["hard"], "requests.nvidia.com/gpu": "0"}}}, field_manager="someone-by-hand")
    gateway().delete(ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "gpu-portal-default-deny-ingress", team.slug))

    repaired = reconcile.cluster_reconcile()

    assert f"ResourceQuota {team.slug}/gpu-portal" in repaired.applied
    assert f"NetworkPolicy {team.slug}/gpu-portal-default-deny-ingress" in repaired.applied
    assert gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert not repaired.errors
    again = reconcile.cluster_reconcile()
    assert (again.applied, again.errors) == ([], {})


def test_deleting_a_team_leaves_no_object_behind(cluster, site, django_capture_on_commit_callbacks):
    team = site.team("gone", gpus=1)
    gateway().apply(probe_job(team.slug, "running", gpus=1))
    cluster.wait_for(lambda: is_admitted(team.slug, "running"), what="a job to run before the team goes")
    slug = team.slug

    with django_capture_on_commit_callbacks(execute=False):
        services.team_delete(actor=site.admin, team=team)
    cluster.wait_for(lambda: reconcile.team_teardown(slug=slug), what="the namespace and queue to be gone", timeout=90)

    assert team_objects(slug) == set()
    assert gateway().get(ObjectRef(KUEUE, "ClusterQueue", slug)) is None
