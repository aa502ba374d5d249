"""Namespaced reads (issue 22, §6; the chart's rbac.namespacedReads, PORTAL_NAMESPACED_READS) on the
simulated cluster seen as the portal's account sees it in that mode: pods, their logs and events,
data volumes and Secrets only in a namespace holding the portal's own RoleBinding, 403 anywhere
else and across the cluster. The portal binds itself in each team namespace it makes, lists and
watches pods namespace by namespace, and still launches, follows and reads its workloads. The
same on the real control plane, as the chart's ServiceAccount: tests/contract/test_chart_namespaced_contract.py."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import connection

from jobs import selectors, sync
from jobs.models import RunInterval, Workload
from jobs.watch import WorkloadInformer
from portal.kube import FIELD_MANAGER, KubeError, ObjectRef, WatchEvent, reset_gateway
from portal.kube.base import KindLists
from portal.kube.counting import CountingGateway
from portal.kube.simulated import SimulatedGateway
from portal.kube.store import NamespacedFollow
from tenants import reconcile, services
from tenants.models import Membership, Team
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import launch, make_ready, wait_for

ROLE, ACCOUNT, PORTAL_NAMESPACE = "portal-gpu-portal-in-team-namespaces", "portal-gpu-portal", "gpu-portal"
QUICK = {"gpu-portal.io/simulated-run-seconds": "2"}


class TeamNamespacesOnly:
    """The simulated cluster as the portal's account sees it with namespaced reads: the kinds of
    the chart's team-namespace role only where the portal's own RoleBinding (that role, its
    ServiceAccount) is, as the API server's RBAC answers; everything else as it is."""

    KINDS = frozenset({"Pod", "Event", "PersistentVolumeClaim", "Secret"})

    def __init__(self, inner: SimulatedGateway) -> None:
        self.inner = inner
        self.refused: list[tuple[str, str | None]] = []

    def cluster_now(self) -> dt.datetime:
        return self.inner.cluster_now()

    def _allowed(self, kind: str, namespace: str | None) -> None:
        if kind not in self.KINDS:
            return
        binding = self.inner.get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                                           namespace)) if namespace else None
        if binding is None or binding["roleRef"]["name"] != ROLE or binding["subjects"] != [
                {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": PORTAL_NAMESPACE}]:
            self.refused.append((kind, namespace))
            where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            raise KubeError(f'{kind.lower()}s is forbidden: User "system:serviceaccount:{PORTAL_NAMESPACE}:{ACCOUNT}" '
                            f"cannot list resource {where}", status=403, reason="Forbidden")

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        self._allowed(obj["kind"], obj["metadata"].get("namespace"))
        return self.inner.apply(obj, field_manager=field_manager, force=force)

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        self._allowed(obj["kind"], obj["metadata"].get("namespace"))
        return self.inner.dry_run(obj, field_manager=field_manager)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._allowed(obj["kind"], obj["metadata"].get("namespace"))
        return self.inner.create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._allowed(obj["kind"], obj["metadata"].get("namespace"))
        return self.inner.replace(obj)

    def delete(self, ref: ObjectRef) -> None:
        self._allowed(ref.kind, ref.namespace)
        self.inner.delete(ref)

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        self._allowed(ref.kind, ref.namespace)
        return self.inner.get(ref)

    def list(self, api_version: str, kind: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
             fields: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
        self._allowed(kind, namespace)
        return self.inner.list(api_version, kind, namespace=namespace, labels=labels, fields=fields)

    def list_kinds(self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None) -> KindLists:
        for _, kind in kinds:
            self._allowed(kind, None)
        return self.inner.list_kinds(kinds, labels=labels)

    def watch(self, api_version: str, kind: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
              resource_version: str | None = None, timeout_seconds: int = 60) -> Iterator[WatchEvent]:
        self._allowed(kind, namespace)
        return self.inner.watch(api_version, kind, namespace=namespace, labels=labels, resource_version=resource_version,
                                timeout_seconds=timeout_seconds)

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        self._allowed("Pod", namespace)
        return self.inner.pod_logs(namespace=namespace, name=name, tail_lines=tail_lines, limit_bytes=limit_bytes)

    def read_subresource(self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return self.inner.read_subresource(ref, subresource, query=query)

    def expect_nodes(self, nodes: Any) -> None:
        self.inner.expect_nodes(nodes)

    def tick(self) -> None:
        self.inner.tick()

    def advance(self, seconds: float) -> None:
        self.inner.advance(seconds)


@pytest.fixture
def namespaced(settings: Any, simulated: SimulatedGateway) -> Iterator[TeamNamespacesOnly]:
    settings.PORTAL_NAMESPACED_READS = True
    settings.PORTAL_TEAM_NAMESPACE_ROLE, settings.PORTAL_SERVICE_ACCOUNT = ROLE, ACCOUNT
    settings.PORTAL_NAMESPACE = PORTAL_NAMESPACE
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    cluster = TeamNamespacesOnly(simulated)
    reset_gateway(cluster)
    yield cluster
    reset_gateway(simulated)


def succeeded(workload: Workload, cluster: TeamNamespacesOnly) -> bool:
    cluster.advance(1)
    sync.sync_all()
    workload.refresh_from_db()
    return workload.phase == Workload.Phase.SUCCEEDED


@pytest.mark.django_db
def test_a_team_made_with_namespaced_reads_binds_the_portals_own_account_in_its_namespace(namespaced, team, flavor):
    make_ready(team, flavor)

    binding = namespaced.inner.get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                                             team.namespace))
    assert binding is not None
    assert binding["roleRef"]["name"] == ROLE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": PORTAL_NAMESPACE}]


@pytest.mark.django_db
def test_with_namespaced_reads_a_launch_runs_is_followed_and_its_logs_read_in_its_own_namespace(
        namespaced, team, flavor, member, training, django_capture_on_commit_callbacks):
    ready = make_ready(team, flavor)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready, training, flavor, units=1, parameters={"epochs": 3})

    wait_for(lambda: succeeded(workload, namespaced), what="the training run to succeed, as the sync reads it")

    (interval,) = RunInterval.objects.filter(workload=workload)
    assert interval.ended_at is not None
    logs = selectors.workload_logs(workload=workload)
    assert not logs.unreachable and logs.pod
    assert namespaced.refused == []  # nothing was asked where the portal may not read


@pytest.mark.django_db
def test_the_status_pass_lists_pods_only_where_a_team_has_workloads_and_never_across_the_cluster(
        namespaced, flavor, team, other_team, member, training, django_capture_on_commit_callbacks):
    for each in (team, other_team):
        make_ready(each, flavor)
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, team, training, flavor, units=1, parameters={"epochs": 3})
    counting = CountingGateway(namespaced)
    reset_gateway(counting)

    sync.sync_all()

    assert counting.kinds[("list", "Pod")] == 1  # vision's namespace; speech, with nothing to follow, costs no call
    assert sum(counting.kinds[("list", kind)] for kind in ("Job", "Deployment", "StatefulSet", "Workload")) == 4
    assert namespaced.refused == []


@pytest.mark.django_db
def test_a_namespace_the_portal_cannot_read_is_left_out_of_the_pass_not_failed(
        namespaced, flavor, team, member, training, django_capture_on_commit_callbacks):
    make_ready(team, flavor)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, team, training, flavor, units=1, parameters={"epochs": 3})
    # As just after switching the mode on, before the team pass has bound the portal there.
    namespaced.inner.delete(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                                      team.namespace))

    result = sync.sync_all()

    assert result is not None
    assert namespaced.refused == [("Pod", team.namespace)]
    workload.refresh_from_db()
    assert workload.is_active  # absence proves nothing: the pods it could not read are not taken as gone


@pytest.mark.django_db
def test_turning_namespaced_reads_off_removes_the_portals_binding_at_the_next_pass(namespaced, team, flavor, settings):
    make_ready(team, flavor)
    settings.PORTAL_NAMESPACED_READS = False

    result = reconcile.cluster_reconcile()

    assert f"RoleBinding {team.namespace}/gpu-portal-service-account" in result.deleted
    assert namespaced.inner.get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                                          team.namespace)) is None


def test_one_namespaces_list_replaces_only_that_namespaces_pods_in_the_informers_cache():
    informer = WorkloadInformer()
    pod = {"apiVersion": "v1", "kind": "Pod"}

    def named(namespace: str, name: str) -> dict[str, Any]:
        return {**pod, "metadata": {"namespace": namespace, "name": name, "labels": {"gpu-portal.io/workload": "1"}}}

    informer._apply("Pod", WatchEvent("RELISTED", {"items": [named("vision", "a")], "namespace": "vision"}))
    informer._apply("Pod", WatchEvent("RELISTED", {"items": [named("speech", "b")], "namespace": "speech"}))
    touched = informer._apply("Pod", WatchEvent("RELISTED", {"items": [], "namespace": "vision"}))

    assert set(informer.store["Pod"]) == {("speech", "b")}
    assert touched == {("vision", 1)}
    assert not informer.ready["Pod"].is_set()  # a namespace's list is not every namespace's


class ForbiddenIn:
    """A cluster that answers a watch in the named namespaces with 403 and elsewhere an empty list."""

    def __init__(self, *forbidden: str) -> None:
        self.forbidden = set(forbidden)

    def watch(self, api_version: str, kind: str, *, namespace: str | None = None, **kwargs: Any) -> Iterator[WatchEvent]:
        if namespace in self.forbidden:
            raise KubeError("forbidden", status=403)
        yield WatchEvent("RELISTED", {"items": []})
        time.sleep(0.05)  # a watch round with nothing to say, then the next


def test_a_namespace_the_portal_may_not_read_yet_does_not_hold_up_the_others():
    reset_gateway(ForbiddenIn("robotics"))  # type: ignore[arg-type]
    heard: list[WatchEvent] = []
    stopping = threading.Event()
    followed = NamespacedFollow("v1", "Pod", None, heard.append, namespaces=lambda: ["vision", "robotics"],
                                stopping=stopping, watch_seconds=1)
    thread = threading.Thread(target=followed.run, daemon=True)
    thread.start()
    try:
        assert followed.listed.wait(10)
        assert {"namespace": "vision", "items": []} in [event.object for event in heard]
    finally:
        stopping.set()
        thread.join(timeout=10)
        reset_gateway(None)


# --- The informer, whose watches run in threads with their own connections: PostgreSQL -----------------


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_the_informer_watches_pods_per_team_namespace_and_follows_a_team_made_after_it_started(
        namespaced, flavor, team, member, training, admin_user, django_capture_on_commit_callbacks):
    make_ready(team, flavor)
    # Namespaces are asked for once here: the new team's is followed from its Job's arrival.
    informer = WorkloadInformer(watch_seconds=1, namespaces_seconds=600)
    worker = threading.Thread(target=informer.run, daemon=True)
    worker.start()
    try:
        wait_for(lambda: all(ready.is_set() for ready in informer.ready.values()), what="every kind listed once",
                 timeout=30)
        later = services.team_create(actor=admin_user, slug="robotics", name="Robotics")
        MembershipFactory(team=later, user=UserFactory(username="rob"), role=Membership.Role.LEAD)
        later = make_ready(Team.objects.get(pk=later.pk), flavor)
        with django_capture_on_commit_callbacks(execute=True):
            workload = launch(later.memberships.get().user, later, training, flavor, units=1, parameters={"epochs": 3})

        def done() -> bool:
            namespaced.advance(1)
            workload.refresh_from_db()
            ended = RunInterval.objects.filter(workload=workload, ended_at__isnull=False).exists()
            return workload.phase == Workload.Phase.SUCCEEDED and ended

        wait_for(done, what="the new team's run to succeed with its interval, as the informer follows it", timeout=60,
                 interval=0.2)
        running = set(informer.followed["Pod"].running)
        assert later.namespace in running and team.namespace not in running  # an idle team costs no watch
    finally:
        informer.stop()
        worker.join(timeout=10)
        for thread in informer.threads:
            thread.join(timeout=10)
        connection.close()
    assert RunInterval.objects.filter(workload=workload, ended_at__isnull=False).count() == 1
    assert namespaced.refused == []
