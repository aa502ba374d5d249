"""Served workloads routed through a Gateway, on both clusters: the API server (with Gateway API's
experimental CRDs of the pinned release) accepts each workload's HTTPRoute with its ExternalAuth
filter to the portal's gate, and each team's ReferenceGrant beside the portal's Service; stopping
deletes the route, and a team's deletion its grant. No gateway data plane runs here: what a
gateway sends the gate is tests/jobs/test_workload_gate.py's."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import manifests, services
from jobs.models import Workload
from portal.kube import ObjectRef, gateway
from tenants import manifests as tenant_manifests
from tenants import reconcile
from tenants import services as tenant_services
from tests.contract.scenarios import HOLD, launch
from tests.deploy.chart import gateway_api_crds

pytestmark = pytest.mark.django_db

GATEWAY_API = "gateway.networking.k8s.io/v1"


@pytest.fixture
def gateway_api(cluster) -> None:
    """Gateway API's CRDs in the real control plane (once: they stay for the session)."""
    if cluster.control_plane is None:
        return
    paths = sorted(gateway_api_crds().glob("*.yaml"))
    for path in paths:
        cluster.control_plane.kubectl("apply", "--server-side", "-f", str(path))
    for path in paths:
        cluster.control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(path))


@pytest.fixture
def routed(settings, cluster, gateway_api) -> str:
    """A site routing workload endpoints through a Gateway, its portal's Service in its own namespace."""
    portal_namespace = cluster.unique("portal")
    gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": portal_namespace}})
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"
    settings.PORTAL_ENDPOINT_ROUTES = "gateway"
    settings.PORTAL_GATEWAY = ("gateways", "apps", "https")
    settings.PORTAL_GATEWAY_AUTH_SERVICE = (portal_namespace, "gpu-portal", 80)
    settings.PORTAL_GATEWAY_TLS = True
    return portal_namespace


def _route(workload: Workload) -> dict[str, Any] | None:
    return gateway().get(ObjectRef(GATEWAY_API, "HTTPRoute", workload.k8s_name, workload.team.namespace))


@pytest.mark.parametrize("kind", ["inference", "notebook"])
def test_a_served_workload_gets_an_httproute_behind_the_gate_and_loses_it_when_stopped(
    cluster, site, templates, routed, kind, settings, django_capture_on_commit_callbacks,
):
    team = site.team(f"routed-{kind[:3]}", gpus=4)
    lead = team.memberships.get().user
    grant = gateway().get(ObjectRef(GATEWAY_API, "ReferenceGrant", tenant_manifests.gate_grant_name(team.namespace), routed))
    assert grant is not None, "the team pass grants the team's routes the portal's Service"
    service = settings.PORTAL_GATEWAY_AUTH_SERVICE[1]
    assert grant["spec"] == {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": team.namespace}],
                             "to": [{"group": "", "kind": "Service", "name": service}]}

    workload = launch(team, lead, templates[kind], site.flavor, django_capture_on_commit_callbacks, units=1)
    assert workload.phase == Workload.Phase.QUEUED, workload.reason
    route = _route(workload)
    assert route is not None
    host = services.ingress_host(workload)
    assert route["spec"]["hostnames"] == [host]
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateways",
                                            "name": "apps", "sectionName": "https"}]
    (rule,) = route["spec"]["rules"]
    assert [(ref["name"], ref["port"]) for ref in rule["backendRefs"]] == [(workload.k8s_name, 80)]
    (auth,) = rule["filters"]
    assert auth["type"] == "ExternalAuth"
    external = auth["externalAuth"]
    assert (external["protocol"], external["backendRef"]["name"], external["backendRef"]["namespace"],
            external["backendRef"]["port"]) == ("HTTP", service, routed, 80)
    assert external["http"]["path"] == "/auth/gateway"
    assert set(external["http"]["allowedResponseHeaders"]) == {"X-Portal-User", "Authorization"}
    assert route["metadata"]["labels"][manifests.WORKLOAD_LABEL] == str(workload.pk)
    # No Ingress beside it, and the page's endpoint is the route's host over the listener's TLS.
    assert gateway().get(ObjectRef("networking.k8s.io/v1", "Ingress", workload.k8s_name, team.namespace)) is None
    assert services.endpoint(workload) == f"https://{host}/"

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)
    assert _route(workload) is None


def test_a_route_made_before_the_site_moved_to_ingresses_goes_when_its_workload_stops(
    cluster, site, templates, routed, settings, django_capture_on_commit_callbacks,
):
    team = site.team("moved", gpus=2)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates["inference"], site.flavor, django_capture_on_commit_callbacks, units=1)
    assert _route(workload) is not None
    settings.PORTAL_ENDPOINT_ROUTES = "ingress"  # the site switches back while it runs
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)
    assert _route(workload) is None


def test_a_deleted_teams_grant_goes_and_another_teams_grant_stays(
    cluster, site, routed, django_capture_on_commit_callbacks,
):
    leaving, staying = site.team("leaving"), site.team("staying")
    refs = {team.slug: ObjectRef(GATEWAY_API, "ReferenceGrant", tenant_manifests.gate_grant_name(team.namespace), routed)
            for team in (leaving, staying)}
    assert all(gateway().get(ref) is not None for ref in refs.values())
    slug, uid = leaving.slug, str(leaving.uid)
    with django_capture_on_commit_callbacks(execute=False):
        tenant_services.team_delete(actor=site.admin, team=leaving)
    cluster.wait_for(lambda: reconcile.team_teardown(slug=slug, uid=uid), what="the team's objects to go", timeout=90)
    assert gateway().get(refs[slug]) is None
    assert gateway().get(refs[staying.slug]) is not None
    # The periodic pass keeps it (it is wanted). (What other tests left in the session's cluster is
    # not this one's: grants in namespaces of their own, say, which the chart's account may not
    # delete there and the pass reports in its errors.)
    result = reconcile.cluster_reconcile()
    assert str(refs[staying.slug]) not in result.deleted and str(refs[staying.slug]) not in result.errors
    assert gateway().get(refs[staying.slug]) is not None
