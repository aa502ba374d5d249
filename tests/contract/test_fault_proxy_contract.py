"""The portal against a real API server that misbehaves: the fault-injecting proxy
(tests/cluster/fault_proxy.py) stands between the gateway and the control plane and answers
some requests with 429 and Retry-After, 500, 503, a dropped connection, an answer lost after the
server applied the request, a 409, or slowly.

The invariants: team reconciles and launches converge (after the faults, one repair pass leaves
nothing to write); the gateway never sends one request more times in a row than its budget; no
cluster object is made twice or left behind a failed workload; no workload stays `submitting`;
and what could not be applied reaches the team page in words.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client

from jobs import kinds, manifests
from jobs import services as job_services
from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway, ref_of, reset_gateway
from portal.kube.kubernetes import KubernetesGateway
from portal.tasks import CLUSTER_TASK_RETRIES
from tenants import reconcile, services
from tenants.models import Membership, Team
from tests.cluster.fault_proxy import FaultPlan, FaultProxy
from tests.conftest import login
from tests.contract.conftest import ClusterUnderTest
from tests.contract.scenarios import HOLD, TEAM_KINDS, launch, wait_for_quota_status
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.cluster]


@pytest.fixture
def proxy(control_plane: Any) -> Iterator[FaultProxy]:
    kubeconfig = yaml.safe_load(Path(control_plane.kubeconfig_path).read_text())
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    faulty = FaultProxy(cluster["server"], ca_file=Path(cluster["certificate-authority"]),
                        cert_file=Path(user["client-certificate"]), key_file=Path(user["client-key"]))
    yield faulty
    faulty.close()


@pytest.fixture
def cluster(settings: Any, db: Any, control_plane: Any, proxy: FaultProxy) -> Iterator[ClusterUnderTest]:
    """The contract suite's real cluster, reached through the proxy (faults off until a test
    turns them on), with the gateway's production budget of attempts and real waits."""
    configuration = k8s_client.Configuration()
    configuration.host = proxy.url
    under_test = ClusterUnderTest("real, behind the fault proxy", KubernetesGateway(configuration), control_plane)
    settings.PORTAL_COHORT = under_test.unique("cohort")
    # As in a worker: a task's retries run (at once, eagerly) instead of propagating to the caller.
    settings.CELERY_TASK_EAGER_PROPAGATES = False
    reset_gateway(under_test.gateway)
    yield under_test
    reset_gateway(None)


def _new_team(site: Any, cluster: ClusterUnderTest, name: str, capture: Any) -> tuple[Team, Any]:
    with capture(execute=True):
        team = services.team_create(actor=site.admin, slug=cluster.unique(name), name=name)
        lead = UserFactory.create(username=cluster.unique(f"{name}-lead"))
        MembershipFactory(team=team, user=lead, role=Membership.Role.LEAD)
        quota_request = services.quota_request_create(
            requester=lead, team=team, lines=[services.LineInput(flavor=site.flavor, units=2)], justification="faults")
        services.quota_request_approve(quota_request=quota_request, approver=site.admin)
    team.refresh_from_db()
    return team, lead


def _objects_of(workload: Workload) -> list[dict[str, Any]]:
    wanted = kinds.workload_objects(spec=job_services.workload_spec(workload))
    return [found for found in (gateway().get(ref_of(obj)) for obj in wanted) if found is not None]


def _team_kinds_present(team: Team) -> set[str]:
    found = set()
    for api_version, kind in TEAM_KINDS:
        if gateway().list(api_version, kind, labels={"gpu-portal.io/team": team.slug})[0]:
            found.add(kind)
    return found


def _repair_and_check_teams(teams: list[tuple[Team, Any]]) -> None:
    """The periodic repair pass, once the API server behaves: it converges, and then has nothing to do."""
    reconcile.cluster_reconcile()
    assert reconcile.cluster_reconcile().writes == 0
    for team, _lead in teams:
        team.refresh_from_db()
        assert team.sync_error == "" and team.sync_state == Team.SyncState.IN_SYNC, (team.slug, team.sync_error)
        assert _team_kinds_present(team) == {kind for _, kind in TEAM_KINDS}


def test_teams_and_launches_converge_through_throttling_errors_drops_and_lost_answers(
        cluster, site, templates, proxy, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    # Teams made while the API server misbehaves.
    proxy.plan = FaultPlan(rate=0.3, seed=11, slow_seconds=1.0)
    teams = [_new_team(site, cluster, name, django_capture_on_commit_callbacks) for name in ("fa", "fb", "fc")]
    injected = proxy.faults()
    proxy.plan = FaultPlan(rate=0)
    _repair_and_check_teams(teams)
    for team, _lead in teams:
        wait_for_quota_status(cluster, team.namespace)

    # Launches while it misbehaves again: each is recorded and created once, or refused in words.
    proxy.plan = FaultPlan(rate=0.3, seed=12, slow_seconds=1.0)
    launched, refused = [], []
    for index in range(8):
        team, lead = teams[index % len(teams)]
        kind = "inference" if index % 4 == 3 else "training"
        try:
            launched.append(launch(team, lead, templates[kind], site.flavor, django_capture_on_commit_callbacks, units=1))
        except DomainError as error:  # the launch's own reads of the cluster may fail too: said in words
            refused.append(str(error))
    injected += proxy.faults()
    proxy.plan = FaultPlan(rate=0)

    assert sum(injected.values()) >= 20 and {"429", "503", "drop", "lost", "slow"} <= set(injected), injected
    assert proxy.longest_retry_run() <= cluster.gateway.max_attempts
    assert len(launched) >= 4 and all("cluster" in why for why in refused), refused
    _repair_and_check_teams(teams)
    for workload in launched:
        workload.refresh_from_db()
        assert workload.phase != Workload.Phase.SUBMITTING, workload.reason
        if workload.phase == Workload.Phase.FAILED:
            assert workload.reason.startswith("The cluster did not take it: "), workload.reason
            cluster.wait_for(lambda w=workload: not _objects_of(w), what=f"nothing of failed {workload.name} left")
            continue
        wanted = kinds.workload_objects(spec=job_services.workload_spec(workload))
        assert len(_objects_of(workload)) == len(wanted), workload.name
        jobs = gateway().list("batch/v1", "Job", namespace=workload.team.namespace,
                              labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
        assert len(jobs) == (1 if workload.kind == "training" else 0)


def test_a_conflict_and_an_outage_reach_the_team_page_in_words_and_the_repair_pass_clears_them(
        cluster, site, proxy, django_capture_on_commit_callbacks):
    quota_path = "/resourcequotas/gpu-portal"
    team, lead = _new_team(site, cluster, "fconflict", django_capture_on_commit_callbacks)
    assert team.sync_state == Team.SyncState.IN_SYNC
    proxy.plan.force("409", lambda method, path: method == "PATCH" and quota_path in path)
    with django_capture_on_commit_callbacks(execute=True):
        services.team_update(actor=site.admin, team=team, description="a conflict")
    team.refresh_from_db()
    assert team.sync_state == Team.SyncState.ERROR
    quota = f"ResourceQuota {team.namespace}/gpu-portal"
    assert team.sync_error.startswith(f"{quota}: conflict: Operation cannot be fulfilled"), team.sync_error
    fragment = login(lead).get(f"/teams/{team.slug}/cluster/", HTTP_HX_REQUEST="true").content.decode()
    assert f"The last apply failed: {quota}: conflict: Operation cannot be fulfilled" in fragment

    # An API server that keeps failing one object outlasts the gateway's and the task's retries.
    for _ in range(cluster.gateway.max_attempts * (1 + CLUSTER_TASK_RETRIES)):
        proxy.plan.force("503", lambda method, path: method == "PATCH" and quota_path in path)
    with django_capture_on_commit_callbacks(execute=True):
        services.team_update(actor=site.admin, team=team, description="an outage")
    team.refresh_from_db()
    assert team.sync_state == Team.SyncState.ERROR
    assert team.sync_error == f"{quota}: the server is currently unable to handle the request", team.sync_error
    assert proxy.longest_retry_run() == cluster.gateway.max_attempts  # each task attempt spent the gateway's budget
    proxy.plan = FaultPlan(rate=0)

    reconcile.cluster_reconcile()
    team.refresh_from_db()
    assert (team.sync_state, team.sync_error) == (Team.SyncState.IN_SYNC, "")
    applied = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.namespace))
    assert applied is not None and applied["spec"]["hard"]
    assert "The last apply failed" not in login(lead).get(f"/teams/{team.slug}/cluster/", HTTP_HX_REQUEST="true").content.decode()
