"""A team's network policies as the API server keeps them: accepted, read back exactly as built
(deny by default both ways, then exactly the listed peers), converged in place for a team that
had the older ingress-only policy, and never written open. The same scenarios on the simulated
cluster and on the real control plane. (No CNI runs there, so these prove the API objects; which
packets pass is the CNI's enforcement of them.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.kube import KubeError, ObjectRef, gateway
from tenants import reconcile
from tenants.models import Team

pytestmark = pytest.mark.django_db

NETPOL = "networking.k8s.io/v1"
NAMES = {"gpu-portal-default-deny-ingress", "gpu-portal-default-deny-egress", "gpu-portal-allow-portal",
         "gpu-portal-allow-ingress-controller"}
DNS_RULE = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
HTTP = [{"protocol": "TCP", "port": "http"}]


@pytest.fixture(autouse=True)
def network_settings(settings):
    """The defaults, spelled out: the test process does not run in a pod, nor read the site's env."""
    settings.PORTAL_NAMESPACE = "gpu-portal"
    settings.PORTAL_POD_LABELS = (("app.kubernetes.io/name", "gpu-portal"),)
    settings.PORTAL_INGRESS_NAMESPACE = "ingress-nginx"
    settings.PORTAL_DNS_NAMESPACE = "kube-system"
    settings.PORTAL_DNS_POD_LABELS = (("k8s-app", "kube-dns"),)
    settings.PORTAL_EGRESS_INTERNET = "off"
    settings.PORTAL_EGRESS_EXCLUDE_PRIVATE = True
    settings.PORTAL_EGRESS_ALLOW_CIDRS = []
    settings.PORTAL_EGRESS_ALLOW_NAMESPACES = []
    return settings


def live_policies(namespace: str) -> dict[str, dict[str, Any]]:
    """Every NetworkPolicy in the namespace, whoever made it."""
    return {item["metadata"]["name"]: item for item in gateway().list(NETPOL, "NetworkPolicy", namespace=namespace)[0]}


def expected_specs(*, egress_allowance: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    return {
        "gpu-portal-default-deny-ingress": {
            "podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}],
        },
        "gpu-portal-default-deny-egress": {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [DNS_RULE, {"to": [{"podSelector": {}}]}, *([{"to": egress_allowance}] if egress_allowance else [])],
        },
        "gpu-portal-allow-portal": {
            "podSelector": {"matchExpressions": [
                {"key": "gpu-portal.io/workload-kind", "operator": "In", "values": ["inference", "notebook", "workspace"]}]},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}},
                                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-portal"}}}],
                         "ports": HTTP}],
        },
        "gpu-portal-allow-ingress-controller": {
            "podSelector": {"matchExpressions": [
                {"key": "gpu-portal.io/workload-kind", "operator": "In", "values": ["inference", "notebook", "workspace"]}]},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}],
                         "ports": HTTP}],
        },
    }


def test_the_api_server_accepts_the_team_policies_and_reads_back_deny_by_default_and_exactly_dns_and_the_team(
        cluster, site):
    team = site.team("netpol")

    live = live_policies(team.slug)
    assert {name: policy["spec"] for name, policy in live.items()} == expected_specs()
    for policy in live.values():
        assert policy["metadata"]["annotations"]["gpu-portal.io/team-uid"] == str(team.uid)


def test_the_sites_allowances_read_back_as_listed_with_the_metadata_address_cut_out(cluster, site, network_settings):
    network_settings.PORTAL_EGRESS_INTERNET = "on"
    network_settings.PORTAL_EGRESS_EXCLUDE_PRIVATE = False
    network_settings.PORTAL_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16", "169.254.0.0/16"]
    network_settings.PORTAL_EGRESS_ALLOW_NAMESPACES = ["minio"]
    team = site.team("open")

    live = live_policies(team.slug)
    assert {name: policy["spec"] for name, policy in live.items()} == expected_specs(egress_allowance=[
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}},
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
        {"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
    ])


def _older_ingress_policy(team: Team) -> dict[str, Any]:
    """What the portal applied before egress: ingress only, and the ingress controller to every pod."""
    return {
        "apiVersion": NETPOL, "kind": "NetworkPolicy",
        "metadata": {"name": "gpu-portal-default-deny-ingress", "namespace": team.slug,
                     "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/team": team.slug},
                     "annotations": {"gpu-portal.io/team-uid": str(team.uid)}},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [
            {"podSelector": {}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
        ]}]},
    }


def _as_before(team: Team) -> None:
    for name in NAMES - {"gpu-portal-default-deny-ingress"}:
        gateway().delete(ObjectRef(NETPOL, "NetworkPolicy", name, team.slug))
    gateway().apply(_older_ingress_policy(team))
    assert set(live_policies(team.slug)) == {"gpu-portal-default-deny-ingress"}


def test_a_team_with_the_older_ingress_policy_gets_it_updated_in_place_not_a_second_one(cluster, site):
    team = site.team("legacy")
    _as_before(team)

    assert reconcile.team_reconcile(team_id=team.pk)

    live = live_policies(team.slug)
    assert {name: policy["spec"] for name, policy in live.items()} == expected_specs()
    # the same object, changed: the ingress controller no longer reaches every pod through it
    assert live["gpu-portal-default-deny-ingress"]["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]


def test_the_periodic_pass_converges_the_older_policy_and_then_writes_nothing(cluster, site):
    team = site.team("legacy-pass")
    _as_before(team)

    first = reconcile.cluster_reconcile()

    assert {f"NetworkPolicy {team.slug}/{name}" for name in NAMES} <= set(first.applied)
    assert not [ref for ref in first.deleted if team.slug in ref]
    assert {name: policy["spec"] for name, policy in live_policies(team.slug).items()} == expected_specs()
    again = reconcile.cluster_reconcile()
    assert [ref for ref in again.applied if team.slug in ref] == []


def test_settings_that_would_open_the_metadata_address_write_nothing(cluster, site, network_settings):
    team = site.team("closed")
    before = live_policies(team.slug)["gpu-portal-default-deny-egress"]["spec"]

    network_settings.PORTAL_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16", "169.254.169.254/32"]
    with pytest.raises(ImproperlyConfigured, match="169.254.169.254/32 is the cloud metadata address"):
        reconcile.team_reconcile(team_id=team.pk)
    with pytest.raises(ImproperlyConfigured, match="169.254.169.254/32 is the cloud metadata address"):
        reconcile.cluster_reconcile()

    assert live_policies(team.slug)["gpu-portal-default-deny-egress"]["spec"] == before


@pytest.mark.parametrize("block", [
    {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]},  # not inside the network
    {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]},  # not a strict subset
    {"cidr": "not-a-network"},
])
def test_the_api_server_refuses_an_ip_block_it_cannot_mean(cluster, site, block):
    team = site.team("refused")
    policy = {"apiVersion": NETPOL, "kind": "NetworkPolicy", "metadata": {"name": "by-hand", "namespace": team.slug},
              "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": block}]}]}}

    with pytest.raises(KubeError) as refused:
        gateway().apply(policy, field_manager="someone-by-hand")

    assert refused.value.status == 422
    assert "by-hand" not in live_policies(team.slug)
