"""A team's network policies, whole: default-deny both ways, DNS, the team itself, the site's
allowances for every combination of the settings, and the cloud metadata address never
reachable whatever they say."""

from __future__ import annotations

import ipaddress
import itertools
import subprocess
import sys
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs import kinds
from jobs import manifests as jobs_manifests
from portal.settings import service_account_namespace
from tenants import manifests as m
from tenants.desired import network_spec

UID = "8d5c2b1e-6f0a-4b7e-9c3d-2a1f0e9b8c7d"
TEAM = m.TeamSpec(slug="vision", uid=UID, quotas=(), kinds=kinds.network_reach())
META = {"namespace": "vision", "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/team": "vision"},
        "annotations": {"gpu-portal.io/team-uid": UID}}

DNS_RULE = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
OWN_NAMESPACE_RULE: dict[str, Any] = {"to": [{"podSelector": {}}]}
# The literal peers each setting adds, in the order the rule lists them.
EXTRA_NAMESPACES = ("registry-mirror", "minio")
NAMESPACE_PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "registry-mirror"}}},
                   {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}]
EXTRA_CIDRS = ("10.20.0.0/16", "169.254.0.0/16", "2001:db8::/32", "fd00::/8")
CIDR_PEERS = [
    {"ipBlock": {"cidr": "10.20.0.0/16"}},
    {"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.254/32"]}},
    {"ipBlock": {"cidr": "2001:db8::/32"}},
    {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:ec2::254/128"]}},
]
PUBLIC_INTERNET_PEERS = [
    {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
        "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "169.254.169.254/32", "172.16.0.0/12", "192.168.0.0/16"]}},
    {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fd00:ec2::254/128", "fe80::/10"]}},
]
WHOLE_INTERNET_PEERS = [
    {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
    {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
]


def team_with(**network: Any) -> m.TeamSpec:
    return replace(TEAM, network=m.NetworkSpec(**network))


def reaches_metadata(policy: dict[str, Any]) -> list[str]:
    """Every ipBlock of the policy that lets a pod reach a metadata address."""
    found = []
    for rule in policy["spec"].get("egress", []):
        for peer in rule.get("to", []):
            block = peer.get("ipBlock")
            if not block:
                continue
            cidr = ipaddress.ip_network(block["cidr"])
            cut = [ipaddress.ip_network(e) for e in block.get("except", [])]
            for text in m.METADATA_NETWORKS:
                address = ipaddress.ip_network(text).network_address
                if address in cidr and not any(address in c for c in cut):
                    found.append(block["cidr"])
    return found


def test_by_default_pods_hear_only_each_other_and_reach_only_dns_and_each_other():
    assert m.make_network_policy(team=TEAM) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "gpu-portal-default-deny-ingress", **META},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]},
    }
    assert m.make_egress_network_policy(team=TEAM) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "gpu-portal-default-deny-egress", **META},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [DNS_RULE, OWN_NAMESPACE_RULE]},
    }


def test_the_portal_reaches_only_the_http_port_of_the_pods_of_kinds_it_asks_something():
    assert m.make_portal_network_policy(team=TEAM) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "gpu-portal-allow-portal", **META},
        "spec": {
            "podSelector": {"matchExpressions": [
                # how idle a notebook or a workspace is; an inference server, its page's Try it questions
                {"key": "gpu-portal.io/workload-kind", "operator": "In", "values": ["inference", "notebook", "workspace"]}]},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-portal"}}}],
                "ports": [{"protocol": "TCP", "port": "http"}],
            }],
        },
    }


def test_the_portal_namespace_and_pod_labels_come_from_the_spec():
    team = replace(TEAM, network=m.NetworkSpec(portal_namespace="platform",
                                               portal_pod_labels=(("app", "portal"), ("component", "worker"))))
    peer = m.make_portal_network_policy(team=team)["spec"]["ingress"][0]["from"]
    assert peer == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}},
                     "podSelector": {"matchLabels": {"app": "portal", "component": "worker"}}}]
    # Without pod labels, every pod of the portal's namespace (never a wider peer).
    anyone = replace(TEAM, network=m.NetworkSpec(portal_namespace="platform", portal_pod_labels=()))
    assert m.make_portal_network_policy(team=anyone)["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}}}]


def test_the_ingress_controller_reaches_only_the_http_port_of_the_pods_of_kinds_that_serve():
    team = replace(TEAM, ingress_namespace="traefik")
    assert m.make_ingress_controller_network_policy(team=team) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "gpu-portal-allow-ingress-controller", **META},
        "spec": {
            "podSelector": {"matchExpressions": [
                {"key": "gpu-portal.io/workload-kind", "operator": "In", "values": ["inference", "notebook", "workspace"]}]},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "traefik"}}}],
                         "ports": [{"protocol": "TCP", "port": "http"}]}],
        },
    }


def test_dns_is_found_by_the_configured_namespace_and_pod_labels():
    team = team_with(dns_namespace="dns", dns_pod_labels=(("app.kubernetes.io/name", "coredns"),))
    assert m.make_egress_network_policy(team=team)["spec"]["egress"][0] == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "coredns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


COMBINATIONS = list(itertools.product([False, True], [True, False], [(), EXTRA_CIDRS], [(), EXTRA_NAMESPACES]))


@pytest.mark.parametrize(("internet", "exclude_private", "cidrs", "namespaces"), COMBINATIONS,
                         ids=[f"internet-{'on' if i else 'off'}-private-{'excluded' if p else 'included'}"
                              f"-{len(c)}-cidrs-{len(n)}-namespaces" for i, p, c, n in COMBINATIONS])
def test_every_combination_of_the_egress_settings_gives_exactly_its_peers(internet, exclude_private, cidrs, namespaces):
    team = team_with(internet=internet, exclude_private=exclude_private, cidrs=cidrs, namespaces=namespaces)
    allowance = [*(NAMESPACE_PEERS if namespaces else []), *(CIDR_PEERS if cidrs else []),
                 *((PUBLIC_INTERNET_PEERS if exclude_private else WHOLE_INTERNET_PEERS) if internet else [])]
    policy = m.make_egress_network_policy(team=team)

    assert policy["spec"] == {
        "podSelector": {}, "policyTypes": ["Egress"],
        "egress": [DNS_RULE, OWN_NAMESPACE_RULE, *([{"to": allowance}] if allowance else [])],
    }
    assert reaches_metadata(policy) == []
    kubernetes_validate.validate(policy, "1.36.0", strict=True)


def test_the_metadata_check_finds_a_block_that_reaches_the_metadata_address():
    open_policy = {"spec": {"egress": [{"to": [{"ipBlock": {"cidr": "169.254.0.0/16"}},
                                               {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7"]}}]}]}}
    assert reaches_metadata(open_policy) == ["169.254.0.0/16"]  # fc00::/7 holds fd00:ec2::254: that one is cut


# --- The metadata address, whatever the settings say ----------------------------------------------


@pytest.mark.parametrize("cidr", ["169.254.169.254/32", "169.254.169.254", " 169.254.169.254/32", "fd00:ec2::254/128",
                                  "FD00:EC2::254/128", "fd00:ec2:0:0:0:0:0:254/128"])
def test_a_network_that_is_the_metadata_address_is_refused_by_the_builder(cidr):
    with pytest.raises(ValueError, match="is the cloud metadata address"):
        m.make_egress_network_policy(team=team_with(cidrs=("10.0.0.0/8", cidr)))


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "128.0.0.0/1", "169.254.0.0/16", "169.254.169.0/24", "169.254.169.254/31",
                                  "::/0", "fd00:ec2::/64", "fc00::/7"])
def test_a_network_around_the_metadata_address_has_it_cut_out(cidr):
    policy = m.make_egress_network_policy(team=team_with(cidrs=(cidr,), internet=True, exclude_private=False))
    assert reaches_metadata(policy) == []
    block = policy["spec"]["egress"][2]["to"][0]["ipBlock"]
    assert block["cidr"] == cidr and set(block["except"]) & set(m.METADATA_NETWORKS)


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "10.0.0.1/8", "not-a-network", "10.0.0.0/8; 169.254.169.254/32",
                                  "256.0.0.0/8", "010.0.0.0/8"])
def test_a_malformed_network_is_refused_with_a_sentence(cidr):
    with pytest.raises(ValueError, match="is not a network in CIDR notation"):
        m.egress_ip_block(cidr)


@pytest.mark.parametrize("cidrs", [["169.254.169.254/32"], ["10.0.0.0/8", "fd00:ec2::254/128"], ["10.0.0.1/8"], ["nope"]])
def test_the_settings_cannot_open_the_metadata_address_or_name_a_malformed_network(settings, cidrs):
    settings.PORTAL_EGRESS_ALLOW_CIDRS = cidrs
    settings.PORTAL_EGRESS_INTERNET = "on"
    settings.PORTAL_EGRESS_EXCLUDE_PRIVATE = False
    with pytest.raises(ImproperlyConfigured, match="PORTAL_EGRESS_ALLOW_CIDRS: "):
        network_spec()


def test_the_widest_settings_still_leave_the_metadata_address_out(settings):
    settings.PORTAL_EGRESS_ALLOW_CIDRS = ["0.0.0.0/0", "::/0", "169.254.0.0/16"]
    settings.PORTAL_EGRESS_INTERNET = "on"
    settings.PORTAL_EGRESS_EXCLUDE_PRIVATE = False
    policy = m.make_egress_network_policy(team=replace(TEAM, network=network_spec()))
    assert len(policy["spec"]["egress"][2]["to"]) == 5
    assert reaches_metadata(policy) == []


def _start_with(**env: str) -> subprocess.CompletedProcess[str]:
    code = "import django; django.setup()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "portal.settings", **env})


@pytest.mark.parametrize(("env", "message"), [
    ({"PORTAL_EGRESS_ALLOW_CIDRS": "10.0.0.0/8,169.254.169.254/32"},
     "PORTAL_EGRESS_ALLOW_CIDRS: 169.254.169.254/32 is the cloud metadata address"),
    ({"PORTAL_EGRESS_ALLOW_CIDRS": "10.0.0.0/33"}, "PORTAL_EGRESS_ALLOW_CIDRS: “10.0.0.0/33” is not a network"),
    ({"PORTAL_EGRESS_INTERNET": "always"}, "PORTAL_EGRESS_INTERNET must be “off” or “on”"),
    ({"PORTAL_POD_LABELS": "app.kubernetes.io/name"}, "PORTAL_POD_LABELS must be Kubernetes labels"),
    ({"PORTAL_EGRESS_ALLOW_NAMESPACES": "minio,Bad_Name"}, "“Bad_Name” is not a Kubernetes namespace name"),
])
def test_a_process_with_a_bad_network_setting_does_not_start(env, message):
    started = _start_with(**env)
    assert started.returncode != 0
    assert message in started.stderr


def test_a_process_with_good_network_settings_starts():
    started = _start_with(PORTAL_EGRESS_ALLOW_CIDRS="10.20.0.0/16,169.254.0.0/16", PORTAL_EGRESS_INTERNET="on",
                          PORTAL_POD_LABELS="app=portal,component=worker", PORTAL_EGRESS_ALLOW_NAMESPACES="minio")
    assert (started.returncode, started.stderr) == (0, "")


def test_the_portal_namespace_is_read_from_the_service_account_when_it_runs_in_a_pod(tmp_path):
    path = tmp_path / "namespace"
    assert service_account_namespace(str(path)) == ""
    path.write_text("platform\n")
    assert service_account_namespace(str(path)) == "platform"


# --- The selectors meet the pods jobs/manifests.py makes ------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _pods(kind: str) -> list[dict[str, Any]]:
    spec = jobs_manifests.WorkloadSpec(
        workload_id=7, name="wl-7", namespace="vision", team="vision", kind=kind, image="img", command=(), args=(),
        env=(), gpu=(("nvidia.com/gpu", 1),), port=8888 if kind in ("inference", "notebook") else 0)
    objects = kinds.workload_objects(spec=spec)
    return [obj["spec"]["template"] for obj in objects if "template" in obj.get("spec", {})]


@pytest.mark.parametrize(("kind", "portal", "ingress_controller"), [
    ("training", False, False), ("distributed", False, False), ("inference", True, True), ("notebook", True, True),
])
def test_the_portal_and_the_ingress_controller_reach_exactly_the_pods_of_their_kinds(kind, portal, ingress_controller):
    policies = {p["metadata"]["name"]: p for p in m.make_network_policies(team=TEAM)}
    for pod in _pods(kind):
        labels = pod["metadata"]["labels"]
        assert _selects(policies["gpu-portal-default-deny-ingress"]["spec"]["podSelector"], labels)
        assert _selects(policies["gpu-portal-default-deny-egress"]["spec"]["podSelector"], labels)
        assert _selects(policies["gpu-portal-allow-portal"]["spec"]["podSelector"], labels) is portal
        assert _selects(policies["gpu-portal-allow-ingress-controller"]["spec"]["podSelector"], labels) is ingress_controller
        if portal or ingress_controller:
            # the policies open the port by name: the pod's serving port must carry it
            assert [p["name"] for p in pod["spec"]["containers"][0]["ports"]] == ["http"]
