"""The chart with rbac.namespacedReads on the real control plane (issue 22, §6): installed once for
the module, its ServiceAccount reads no pod, log, event or data volume and writes no Secret
outside the namespaces the portal made for teams, and the portal, as that account, still
provisions a team (binding itself there), launches, follows the status through the full pass and
the informer, reads logs, and stops. The default mode: tests/contract/test_chart_contract.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client as k8s_client

from jobs import manifests as job_manifests
from jobs import selectors, sync
from jobs.models import RunInterval, Workload
from portal.kube import KubeError, ObjectRef, gateway
from portal.kube.kubernetes import KubernetesGateway
from tests.contract.scenarios import HOLD, QUICK, launch, phase_of
from tests.contract.test_chart_contract import (
    Release,
    _refused,
    account_gateway,
    as_the_chart_account,
    installed,
)
from tests.contract.test_gateway_routes_contract import (  # noqa: F401 - run as the chart's account, routes on
    gateway_api,
    test_a_deleted_teams_grant_goes_and_another_teams_grant_stays,
    test_a_served_workload_gets_an_httproute_behind_the_gate_and_loses_it_when_stopped,
)
from tests.contract.test_watch_contract import (  # noqa: F401 - run as the chart's account, reads namespaced
    test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval,
)
from tests.contract.test_workload_contract import (  # noqa: F401
    test_stopping_removes_every_object_and_ends_the_interval,
)

pytestmark = [pytest.mark.cluster]
test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval = pytest.mark.services(
    pytest.mark.django_db(transaction=True)(
        test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval))

# Workload routes through a Gateway in this release too: its account writes HTTPRoutes in team
# namespaces and each team's ReferenceGrant only in its own (the gateway scenarios run as it).
NAMESPACED_READS = {"rbac": {"namespacedReads": True},
                    "workloadIngress": {"routes": "gateway", "gateway": "gateways/apps/https"}}


@pytest.fixture(scope="module")
def release(control_plane) -> Iterator[Release]:
    yield from installed(Release(control_plane, NAMESPACED_READS))


@pytest.fixture(scope="module")
def portal_gateway(release) -> KubernetesGateway:
    return account_gateway(release)


@pytest.fixture
def cluster(request, settings, db, release, portal_gateway, control_plane):
    """The contract suite's `cluster` as the chart's ServiceAccount, with the environment the chart
    gives in this mode."""
    settings.PORTAL_NAMESPACED_READS = True
    settings.PORTAL_TEAM_NAMESPACE_ROLE = f"{release.fullname}-in-team-namespaces"
    settings.PORTAL_SERVICE_ACCOUNT = release.fullname
    settings.PORTAL_NAMESPACE = release.namespace
    yield from as_the_chart_account(settings, release, portal_gateway)


@pytest.fixture
def routed(settings, release, gateway_api) -> str:  # noqa: F811 - the imported fixture, asked for
    """As the chart's environment says: routes on its Gateway, the filter to the release's Service."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"
    settings.PORTAL_ENDPOINT_ROUTES = "gateway"
    settings.PORTAL_GATEWAY = ("gateways", "apps", "https")
    settings.PORTAL_GATEWAY_AUTH_SERVICE = (release.namespace, release.fullname, 80)
    settings.PORTAL_GATEWAY_TLS = True
    return release.namespace


def allowed(portal: KubernetesGateway, *, verb: str, resource: str, namespace: str | None,
            subresource: str = "") -> bool:
    """The API server's own answer, for the portal's account, to "may I?" (SelfSubjectAccessReview)."""
    api = k8s_client.AuthorizationV1Api(k8s_client.ApiClient(portal.configuration))
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "subresource": subresource,
                                              **({"namespace": namespace} if namespace else {})}}}
    answer = api.create_self_subject_access_review(cast(Any, review))  # the client sends a dict as it is
    assert answer.status is not None
    return bool(answer.status.allowed)


def test_the_portals_account_reads_no_pod_log_event_or_volume_outside_team_namespaces(release, portal_gateway):
    for namespace in ("kube-system", release.namespace, None):
        for kind in ("Pod", "Event", "PersistentVolumeClaim"):
            _refused(lambda kind=kind, namespace=namespace: portal_gateway.list("v1", kind, namespace=namespace))
    _refused(lambda: portal_gateway.get(ObjectRef("v1", "Pod", "kube-apiserver", "kube-system")))
    _refused(lambda: portal_gateway.pod_logs(namespace="kube-system", name="kube-apiserver"))
    _refused(lambda: next(iter(portal_gateway.watch("v1", "Pod", timeout_seconds=1))))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sneaky", "namespace": release.namespace},
              "stringData": {"token": "t"}}
    _refused(lambda: portal_gateway.apply(secret))
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "sneaky", "namespace": release.namespace},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    _refused(lambda: portal_gateway.apply(claim))
    assert not allowed(portal_gateway, verb="create", resource="persistentvolumeclaims", namespace="kube-system")
    assert not allowed(portal_gateway, verb="get", resource="pods", subresource="log", namespace="kube-system")
    assert not allowed(portal_gateway, verb="list", resource="pods", namespace=None)


def test_the_portal_binds_itself_in_a_team_namespace_and_reads_only_there(cluster, site, release, portal_gateway):
    team = site.team("reads", gpus=1)

    binding = gateway().get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                                      team.namespace))
    assert binding is not None
    assert binding["roleRef"]["name"] == f"{release.fullname}-in-team-namespaces"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": release.fullname, "namespace": release.namespace}]
    assert allowed(portal_gateway, verb="list", resource="pods", namespace=team.namespace)
    assert allowed(portal_gateway, verb="get", resource="pods", subresource="log", namespace=team.namespace)
    assert allowed(portal_gateway, verb="list", resource="events", namespace=team.namespace)
    for verb in ("list", "create", "patch", "delete"):  # the team's data volumes (jobs/volumes.py)
        assert allowed(portal_gateway, verb=verb, resource="persistentvolumeclaims", namespace=team.namespace), verb
    assert portal_gateway.list("v1", "Pod", namespace=team.namespace)[0] == []
    # Another namespace, even one labelled as the portal's but not bound, stays closed.
    other = site.team("elsewhere")
    gateway().delete(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                               other.namespace))
    cluster.wait_for(lambda: not allowed(portal_gateway, verb="list", resource="pods", namespace=other.namespace),
                     what="the portal's reads in a namespace whose binding went to end")
    _refused(lambda: portal_gateway.list("v1", "Pod", namespace=other.namespace))


def test_a_training_job_runs_is_synced_and_its_logs_are_read_as_the_namespaced_account(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    team = site.team("train", gpus=2)
    workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                      django_capture_on_commit_callbacks, units=2)

    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.SUCCEEDED,
                     what="the training job to succeed, as the full pass reads it per namespace", timeout=90)

    (interval,) = RunInterval.objects.filter(workload=workload)
    assert interval.ended_at is not None and interval.units == 2
    # KWOK's pods have no kubelet to serve a log: the API server may answer with an error, never a refusal.
    logs = selectors.workload_logs(workload=workload)
    assert logs.pod and "forbidden" not in logs.unreachable.lower(), logs.unreachable


def test_a_notebook_gets_its_token_secret_written_in_its_team_namespace(cluster, site, templates, settings,
                                                                       django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("nb", gpus=1)
    workload = launch(team, team.memberships.get().user, templates["notebook"], site.flavor,
                      django_capture_on_commit_callbacks, units=1)

    assert workload.phase == Workload.Phase.QUEUED, workload.reason
    # Read back with the admin's account: the portal's writes a Secret and never reads one.
    assert gateway().get(ObjectRef("v1", "Secret", f"{workload.k8s_name}-token", team.namespace)) is not None
    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.RUNNING, what="the notebook to run")
    pods = gateway().list("v1", "Pod", namespace=team.namespace,
                          labels={job_manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
    assert pods
    sync.sync_all()
    assert RunInterval.objects.filter(workload=workload).exists()


def test_a_pass_leaves_out_a_namespace_it_may_not_read_and_goes_on(cluster, site, templates, settings, portal_gateway,
                                                                  django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("unbound", gpus=1)
    workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                      django_capture_on_commit_callbacks, units=1)
    gateway().delete(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-service-account",
                               team.namespace))

    def refused_there() -> bool:
        try:
            portal_gateway.list("v1", "Pod", namespace=team.namespace)
        except KubeError as error:
            return error.status == 403
        return False

    cluster.wait_for(refused_there, what="the API server to stop the portal's reads there")
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.is_active, workload.reason  # unread pods are not taken as gone
