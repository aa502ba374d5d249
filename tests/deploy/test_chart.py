"""The Helm chart (deploy/helm/gpu-portal) rendered with helm for a few value sets: what every
pod gets, the RBAC it asks for, and that a missing required value fails by name. The same chart
installed on the real control plane: tests/contract/test_chart_contract.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import yaml

from jobs import kinds
from tenants import manifests
from tenants import services as tenant_services
from tests.deploy.chart import CHART, ROOT, by_kind, container_env, merged, pod_specs, render, run_helm

EVERYTHING_ON = {
    "oidc": {"enabled": True, "clientId": "gpu-portal", "clientSecret": {"existingSecret": "oidc"},
             "issuer": "https://sso.example.com", "authorizationEndpoint": "https://sso.example.com/auth",
             "tokenEndpoint": "https://sso.example.com/token", "userEndpoint": "https://sso.example.com/userinfo",
             "jwksEndpoint": "https://sso.example.com/jwks"},
    "metrics": {"existingSecret": "gpu-portal-metrics"},
    "telemetry": {"prometheusUrl": "http://prometheus-operated.monitoring:9090", "token": {"existingSecret": "prometheus"}},
    "email": {"host": "smtp.example.com"},
    "ingress": {"tls": {"secretName": "gpu-portal-tls"}},
    "web": {"autoscaling": {"enabled": True}},
    "workloadIngress": {"domain": "apps.example.com", "clusterIssuer": "letsencrypt"},
    "networkPolicy": {"prometheus": {"namespace": "monitoring"},
                      "egress": {"database": {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}}},
    "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "settings": {"SESSION_IDLE_SECONDS": "3600"},
    "image": {"digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"node-role.example.com/system": "true"},
    "worker": {"tolerations": [{"key": "dedicated", "value": "portal", "effect": "NoSchedule"}]},
    "cluster": {"namespacePrefix": "gpu-", "imageRegistries": ["ghcr.io/acme"], "egress": {"internet": True}},
}
SECRETS = {
    ("gpu-portal-secret-key", "secret-key"): "Zq8-vT2#mW9xLr4!pN7sKc1@yB6hFd3$jG5uEa0%oX+iQ/Hw" * 2,
    ("gpu-portal-database", "url"): "postgres://portal:pw@db:5432/portal",
    ("gpu-portal-redis", "url"): "redis://redis:6379/0", ("gpu-portal-metrics", "token"): "m" * 32,
    ("oidc", "client-secret"): "oidc-secret", ("prometheus", "token"): "p" * 32,
}


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(merged(EVERYTHING_ON))


@pytest.fixture(scope="module")
def minimal() -> list[dict[str, Any]]:
    return render(merged())


NAMESPACED_READS = {"rbac": {"namespacedReads": True}}
# What the portal does only in team namespaces when its reads are namespaced.
TEAM_NAMESPACE_RESOURCES = {"secrets", "persistentvolumeclaims", "pods", "pods/log", "events"}


@pytest.fixture(scope="module")
def namespaced() -> list[dict[str, Any]]:
    return render(merged(EVERYTHING_ON, NAMESPACED_READS))


def test_helm_lints_the_chart_with_the_required_values_and_with_every_option_on(tmp_path):
    for name, values in (("required", merged()), ("everything", merged(EVERYTHING_ON)),
                         ("namespaced", merged(EVERYTHING_ON, NAMESPACED_READS))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        result = run_helm("lint", "--strict", str(CHART), "--values", str(path), check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def _without(values: dict[str, Any], dotted: str) -> dict[str, Any]:
    *parents, last = dotted.split(".")
    node = values
    for key in parents:
        node = node[key]
    node.pop(last)
    return values


@pytest.mark.parametrize("value", ["image.repository", "siteUrl", "secretKey.existingSecret", "database.existingSecret",
                                   "redis.existingSecret"])
def test_a_missing_required_value_fails_the_install_with_a_message_naming_it(value):
    result = run_helm("template", "portal", str(CHART), values=_without(merged(), value), check=False)
    assert result.returncode != 0
    path = "/" + value.replace(".", "/")
    parent, _, leaf = path.rpartition("/")
    # helm reports the schema's verdict with the JSON pointer of the value, or of its parent and the property's name.
    assert path in result.stderr or (f"'{parent or '/'}'" in result.stderr and f"'{leaf}'" in result.stderr), result.stderr


def test_an_empty_required_value_or_a_half_configured_sign_in_fails_naming_the_value():
    empty = run_helm("template", "portal", str(CHART), values=merged({"database": {"existingSecret": ""}}), check=False)
    assert empty.returncode != 0 and "/database/existingSecret" in empty.stderr, empty.stderr
    oidc = run_helm("template", "portal", str(CHART), values=merged({"oidc": {"enabled": True}}), check=False)
    assert oidc.returncode != 0 and "/oidc/clientId" in oidc.stderr, oidc.stderr
    typo = run_helm("template", "portal", str(CHART), values=merged({"siteURL": "https://x"}), check=False)
    assert typo.returncode != 0 and "siteURL" in typo.stderr, typo.stderr


def test_the_portal_reads_gpu_telemetry_from_the_prometheus_named_and_a_bad_address_is_refused(rendered, minimal):
    for component in ("web", "worker"):  # the pages read it; the idle and XID sweeps run in the worker
        env = container_env(pod_specs(rendered)[f"portal-gpu-portal-{component}"]["containers"][0], SECRETS)
        assert env["PROMETHEUS_URL"] == "http://prometheus-operated.monitoring:9090" and env["PROMETHEUS_TOKEN"] == "p" * 32
    assert "PROMETHEUS_URL" not in container_env(pod_specs(minimal)["portal-gpu-portal-web"]["containers"][0], SECRETS)
    bad = run_helm("template", "portal", str(CHART), values=merged({"telemetry": {"prometheusUrl": "prometheus:9090"}}),
                   check=False)
    assert bad.returncode != 0 and "/telemetry/prometheusUrl" in bad.stderr, bad.stderr


def test_every_pod_runs_restricted_with_resources_and_a_writable_tmp_only(rendered):
    specs = pod_specs(rendered)
    assert set(specs) == {f"portal-gpu-portal-{c}" for c in ("web", "worker", "beat", "watcher", "migrate")}
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        (container,) = spec["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "privileged": False,
            "capabilities": {"drop": ["ALL"]}}, name
        assert container["resources"]["requests"] and container["resources"]["limits"], name
        assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}], name
        assert [v["name"] for v in spec["volumes"]] == ["tmp"] and "emptyDir" in spec["volumes"][0], name
        assert spec["nodeSelector"] == {"node-role.example.com/system": "true"}, name
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        assert container["image"] == "registry.example.com/gpu-portal@sha256:" + "ab" * 32, name
    assert "tolerations" in specs["portal-gpu-portal-worker"] and "tolerations" not in specs["portal-gpu-portal-web"]


def test_a_service_account_token_only_where_the_portal_talks_to_the_api_server(rendered):
    specs = pod_specs(rendered)
    assert specs["portal-gpu-portal-migrate"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in specs["portal-gpu-portal-migrate"]  # the hook runs before the release's accounts exist
    for component in ("web", "worker", "watcher"):
        assert specs[f"portal-gpu-portal-{component}"]["serviceAccountName"] == "portal-gpu-portal"
    # Beat holds a Lease and nothing else.
    assert specs["portal-gpu-portal-beat"]["serviceAccountName"] == "portal-gpu-portal-beat"
    for account in by_kind(rendered, "ServiceAccount").values():
        assert account["automountServiceAccountToken"] is False  # only the pods above ask for one


def test_the_processes_run_the_agreed_commands_and_the_leaders_get_their_lease(rendered):
    specs = pod_specs(rendered)
    commands = {name.removeprefix("portal-gpu-portal-"): spec["containers"][0]["command"] for name, spec in specs.items()}
    assert commands["web"][:4] == ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000"]
    assert commands["worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["beat"] == ["python", "manage.py", "run_beat"]
    assert commands["watcher"] == ["python", "manage.py", "watch_workloads"]
    assert commands["migrate"] == ["python", "manage.py", "migrate", "--noinput"]
    for component, variable, lease in (("watcher", "PORTAL_LEADER_LEASE", "portal-watcher"),
                                       ("beat", "PORTAL_BEAT_LEASE", "portal-beat")):  # the names each command reads
        env = container_env(specs[f"portal-gpu-portal-{component}"]["containers"][0], SECRETS)
        assert env["PORTAL_LEADER_ELECTION"] == "1" and env[variable] == lease
        assert {"POD_NAME", "POD_NAMESPACE"} <= set(env)
    assert "PORTAL_LEADER_LEASE" not in container_env(specs["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    job = by_kind(rendered, "Job")["portal-gpu-portal-migrate"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_the_web_pods_are_probed_on_healthz_and_readyz(rendered):
    web = pod_specs(rendered)["portal-gpu-portal-web"]["containers"][0]
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert web["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container_env(web, SECRETS)["PORTAL_READINESS_CHECKS"] == "database,broker"


def test_every_environment_name_the_chart_sets_is_one_the_portal_reads(rendered):
    from portal.configuration import DECLARED  # every setting portal/settings.py reads, and only those

    for name, spec in pod_specs(rendered).items():
        env = container_env(spec["containers"][0], SECRETS)
        unknown = set(env) - set(DECLARED) - {"POD_IP"}
        assert not unknown, f"{name} sets {sorted(unknown)}, which portal/settings.py never reads"


def test_the_portal_passes_check_deploy_with_the_charts_environment(rendered):
    web = pod_specs(rendered)["portal-gpu-portal-web"]["containers"][0]
    env = container_env(web, SECRETS)
    assert env["ALLOWED_HOSTS"].split(",") == [
        "gpu.example.com", "portal-gpu-portal", "portal-gpu-portal.gpu-portal.svc.cluster.local", "10.244.0.7"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "KUBE", "OIDC_", "DJANGO"))}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
        env={**clean, **env, "PORTAL_VAR_DIR": "/nonexistent-not-written"}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_cluster_role_asks_for_no_wildcard_no_escalation_and_reads_no_secret(rendered):
    role = by_kind(rendered, "ClusterRole")["portal-gpu-portal"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        if "secrets" in rule["resources"]:
            assert set(rule["verbs"]) == {"create", "patch", "delete"}
        if "persistentvolumeclaims" in rule["resources"]:  # the team's data volumes: made, grown, deleted; never watched
            assert set(rule["verbs"]) == {"get", "list", "create", "patch", "delete"}
        assert not {"clusterroles", "clusterrolebindings", "roles", "serviceaccounts/token"} & set(rule["resources"])
    # Exactly the kinds portal/kube's table names (configmaps are only the simulated cluster's).
    granted = {(group, resource) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted <= KNOWN
    # Leases are the release namespace's Role's (leader election), never cluster-wide; Kueue's
    # visibility ClusterQueues are read only through their pendingworkloads subresource; Volcano's
    # kinds are granted only to a site on Volcano, Gateway API's to a site routing through a Gateway.
    assert KNOWN - granted - {("coordination.k8s.io", "leases")} == {
        ("", "configmaps"), ("visibility.kueue.x-k8s.io", "clusterqueues"), *VOLCANO, *GATEWAY_API}


def test_on_volcano_the_cluster_role_holds_volcanos_queues_pod_groups_and_jobs_and_nothing_of_kueue():
    objects = render(merged(EVERYTHING_ON, {"cluster": {"queueBackend": "volcano"}}))
    roles = by_kind(objects, "ClusterRole")
    portal, member = roles["portal-gpu-portal"]["rules"], roles["portal-gpu-portal-member"]["rules"]
    granted = {(group, resource) for rule in portal for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted <= KNOWN and granted >= VOLCANO
    assert not [kind for kind in granted if "kueue" in kind[0]]
    assert _allows(portal, "scheduling.volcano.sh", "queues", "patch") and _allows(portal, "scheduling.volcano.sh",
                                                                                     "podgroups", "delete")
    assert _allows(member, "scheduling.volcano.sh", "podgroups", "list")
    assert not _allows(member, "kueue.x-k8s.io", "workloads", "list")
    # A training runs as a Volcano Job, not a batch Job: the portal makes the one and may not make the other.
    assert _allows(portal, "batch.volcano.sh", "jobs", "create") and _allows(member, "batch.volcano.sh", "jobs", "list")
    assert not _allows(portal, "batch", "jobs", "create") and not _allows(member, "batch", "jobs", "list")
    env = container_env(pod_specs(objects)["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    assert env["PORTAL_QUEUE_BACKEND"] == "volcano"


def test_a_queue_backend_the_chart_does_not_know_is_refused_by_its_schema():
    result = run_helm("template", "portal", str(CHART), values=merged({"cluster": {"queueBackend": "slurm"}}), check=False)
    assert result.returncode != 0 and "queueBackend" in result.stderr


def _known() -> set[tuple[str, str]]:
    from portal.kube.base import KINDS

    return {(info.group, info.plural) for info in KINDS.values()} | {
        ("", "pods/log"), ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads")}  # Kueue's pending


KNOWN = _known()
VOLCANO = {("scheduling.volcano.sh", "queues"), ("scheduling.volcano.sh", "podgroups"), ("batch.volcano.sh", "jobs")}


GATEWAY_API = {("gateway.networking.k8s.io", "httproutes"), ("gateway.networking.k8s.io", "referencegrants")}
GATEWAY_ROUTES = {"workloadIngress": {"routes": "gateway", "gateway": "gateways/apps/https", "clusterIssuer": ""}}


def test_routes_through_a_gateway_write_httproutes_and_each_teams_grant_only_beside_the_portals_service():
    objects = render(merged(EVERYTHING_ON, GATEWAY_ROUTES))
    portal = by_kind(objects, "ClusterRole")["portal-gpu-portal"]["rules"]
    assert all(_allows(portal, "gateway.networking.k8s.io", "httproutes", verb)
               for verb in ("get", "list", "watch", "create", "patch", "delete"))
    # Grants are read across the cluster (the team pass lists what it owns) and written only here.
    assert _allows(portal, "gateway.networking.k8s.io", "referencegrants", "list")
    assert not _allows(portal, "gateway.networking.k8s.io", "referencegrants", "create")
    grants = by_kind(objects, "Role")["portal-gpu-portal-gate-grants"]["rules"]
    assert grants == [{"apiGroups": ["gateway.networking.k8s.io"], "resources": ["referencegrants"],
                       "verbs": ["create", "patch", "delete"]}]
    binding = by_kind(objects, "RoleBinding")["portal-gpu-portal-gate-grants"]
    assert binding["roleRef"]["name"] == "portal-gpu-portal-gate-grants"
    env = container_env(pod_specs(objects)["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    assert (env["PORTAL_ENDPOINT_ROUTES"], env["PORTAL_GATEWAY"], env["PORTAL_GATEWAY_AUTH_SERVICE"],
            env["PORTAL_GATEWAY_TLS"]) == ("gateway", "gateways/apps/https", "gpu-portal/portal-gpu-portal:80", "1")
    # Without the filter (the gateway asks the gate itself) the portal writes no grant at all.
    bare = render(merged(EVERYTHING_ON, GATEWAY_ROUTES, {"workloadIngress": {"gatewayAuthFilter": False}}))
    assert "portal-gpu-portal-gate-grants" not in by_kind(bare, "Role")
    assert not _allows(by_kind(bare, "ClusterRole")["portal-gpu-portal"]["rules"], "gateway.networking.k8s.io",
                       "referencegrants", "list")
    assert container_env(pod_specs(bare)["portal-gpu-portal-worker"]["containers"][0], SECRETS)[
        "PORTAL_GATEWAY_AUTH_SERVICE"] == ""


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] and not r.get("resourceNames")
               for r in rules)


def test_the_portal_holds_every_rule_of_the_member_role_so_it_binds_it_without_bind(rendered):
    roles = by_kind(rendered, "ClusterRole")
    portal, member = roles["portal-gpu-portal"]["rules"], roles["portal-gpu-portal-member"]["rules"]
    for rule in member:
        assert not {"create", "patch", "update", "delete"} & set(rule["verbs"])
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert _allows(portal, group, resource, verb), (group, resource, verb)
    env = container_env(pod_specs(rendered)["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    assert env["PORTAL_MEMBER_CLUSTER_ROLE"] == "portal-gpu-portal-member"


def _verbs(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(group, resource, verb, tuple(rule.get("resourceNames", ()))) for rule in rules
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


def test_by_default_the_portal_reads_pods_logs_events_and_volumes_across_the_cluster_and_binds_no_role(rendered):
    roles = by_kind(rendered, "ClusterRole")
    assert set(roles) == {"portal-gpu-portal", "portal-gpu-portal-member"}
    portal = roles["portal-gpu-portal"]["rules"]
    for resource, verb in (("pods", "watch"), ("pods/log", "get"), ("events", "list"), ("persistentvolumeclaims", "list"),
                           ("secrets", "create")):
        assert _allows(portal, "", resource, verb), (resource, verb)
    env = container_env(pod_specs(rendered)["portal-gpu-portal-watcher"]["containers"][0], SECRETS)
    assert "PORTAL_NAMESPACED_READS" not in env


def test_with_namespaced_reads_the_cluster_role_keeps_no_read_of_pods_logs_events_volumes_nor_secrets(rendered, namespaced):
    roles = by_kind(namespaced, "ClusterRole")
    assert set(roles) == {"portal-gpu-portal", "portal-gpu-portal-member", "portal-gpu-portal-in-team-namespaces"}
    portal, in_teams = roles["portal-gpu-portal"]["rules"], roles["portal-gpu-portal-in-team-namespaces"]["rules"]
    assert not {resource for rule in portal for resource in rule["resources"]} & TEAM_NAMESPACE_RESOURCES
    # `bind` on exactly the two roles it binds in team namespaces, by name, and nothing else.
    assert [rule for rule in portal if "bind" in rule["verbs"]] == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "resourceNames": ["portal-gpu-portal-in-team-namespaces", "portal-gpu-portal-member"], "verbs": ["bind"]}]
    assert {resource for rule in in_teams for resource in rule["resources"]} == TEAM_NAMESPACE_RESOURCES
    # What left the ClusterRole is exactly what the team namespaces' role holds: nothing more, nothing lost.
    by_default = by_kind(rendered, "ClusterRole")["portal-gpu-portal"]["rules"]
    without_bind = [rule for rule in portal if "bind" not in rule["verbs"]]
    assert _verbs(by_default) == _verbs(without_bind) | _verbs(in_teams)
    # In a team namespace, its own binding and the ClusterRole together hold the member role.
    for rule in roles["portal-gpu-portal-member"]["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert _allows([*without_bind, *in_teams], group, resource, verb), (group, resource, verb)
    # Only the ServiceAccount the portal's pods run as is bound across the cluster; the team role is bound per namespace.
    (binding,) = by_kind(namespaced, "ClusterRoleBinding").values()
    assert binding["roleRef"]["name"] == "portal-gpu-portal"


def test_with_namespaced_reads_each_team_binds_the_role_and_the_account_the_chart_made(namespaced, settings):
    env = container_env(pod_specs(namespaced)["portal-gpu-portal-watcher"]["containers"][0], SECRETS)
    assert env["PORTAL_NAMESPACED_READS"] == "1"
    settings.PORTAL_NAMESPACED_READS = True
    settings.PORTAL_TEAM_NAMESPACE_ROLE = env["PORTAL_TEAM_NAMESPACE_ROLE"]
    settings.PORTAL_SERVICE_ACCOUNT = env["PORTAL_SERVICE_ACCOUNT"]
    settings.PORTAL_NAMESPACE = env["PORTAL_NAMESPACE"]
    from tenants.desired import portal_reader

    reader = portal_reader()
    assert reader is not None
    team = manifests.TeamSpec(slug="vision", uid="u", quotas=(), portal_reader=reader)
    binding = manifests.make_portal_role_binding(team=team, reader=reader)
    assert binding["roleRef"]["name"] in by_kind(namespaced, "ClusterRole")
    (subject,) = binding["subjects"]
    assert subject["name"] in by_kind(namespaced, "ServiceAccount") and subject["namespace"] == "gpu-portal"
    assert subject["name"] == by_kind(namespaced, "ClusterRoleBinding")["portal-gpu-portal"]["subjects"][0]["name"]


def test_with_namespaced_reads_the_portal_passes_check_deploy_with_the_charts_environment(namespaced):
    env = container_env(pod_specs(namespaced)["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "KUBE", "OIDC_", "DJANGO"))}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
        env={**clean, **env, "PORTAL_VAR_DIR": "/nonexistent-not-written"}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_namespaced_reads_without_the_admission_policy_fails_the_install_saying_why():
    result = run_helm("template", "portal", str(CHART), check=False,
                      values=merged(NAMESPACED_READS, {"rbac": {"admissionPolicy": False}}))
    assert result.returncode != 0
    assert "rbac.namespacedReads needs rbac.admissionPolicy" in result.stderr, result.stderr


def test_the_leases_are_the_only_thing_granted_in_the_release_namespace(rendered):
    (role,) = by_kind(rendered, "Role").values()
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["portal-watcher", "portal-beat"],
         "verbs": ["get", "update", "patch"]},
    ]


def test_the_team_network_policy_admits_the_worker_and_the_web_pods_and_no_other_portal_pod(rendered):
    from portal.configuration import parse_labels

    specs = pod_specs(rendered)
    env = container_env(specs["portal-gpu-portal-worker"]["containers"][0], SECRETS)
    labels = parse_labels("PORTAL_POD_LABELS", env["PORTAL_POD_LABELS"])
    team = manifests.TeamSpec(slug="vision", quotas=(), uid="u", network=manifests.NetworkSpec(
        portal_namespace=env["PORTAL_NAMESPACE"], portal_pod_labels=labels), kinds=kinds.network_reach())
    policy = manifests.make_portal_network_policy(team=team)
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}}
    selector = peer["podSelector"]["matchLabels"]
    deployments = by_kind(rendered, "Deployment")
    admitted = [name for name, d in deployments.items()
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
    assert sorted(admitted) == ["portal-gpu-portal-web", "portal-gpu-portal-worker"]
    assert rule["ports"] == [{"protocol": "TCP", "port": manifests.HTTP_PORT_NAME}]
    # The portal's side: each may leave for exactly the pods of the kinds it asks, on that port,
    # and together they are the kinds the team side admits the portal to.
    policies = by_kind(rendered, "NetworkPolicy")
    reached = []
    for component, asked in (("worker", ["notebook", "workspace"]), ("web", ["inference"])):
        egress = policies[f"portal-gpu-portal-{component}-to-team-servers"]["spec"]
        assert egress["podSelector"]["matchLabels"].items() <= deployments[f"portal-gpu-portal-{component}"]["spec"][
            "template"]["metadata"]["labels"].items()
        servers = {"namespaceSelector": {"matchLabels": {manifests.MANAGED_BY_LABEL: manifests.MANAGER}},
                   "podSelector": {"matchExpressions": [{"key": manifests.WORKLOAD_KIND_LABEL, "operator": "In",
                                                         "values": asked}]}}
        assert egress["egress"] == [{"to": [servers], "ports": [{"port": manifests.HTTP_PORT_NAME, "protocol": "TCP"}]}]
        reached += asked
    assert sorted(reached) == sorted(kinds.network_reach().portal_reached)


def test_the_portal_network_policy_admits_the_ingress_controller_and_prometheus_and_narrows_egress(rendered, minimal):
    policy = by_kind(rendered, "NetworkPolicy")["portal-gpu-portal"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    sources = [peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in policy["ingress"][0]["from"]]
    assert sources == ["ingress-nginx", "monitoring"]
    database = [rule for rule in policy["egress"] if {"port": 5432, "protocol": "TCP"} in rule.get("ports", [])]
    assert database == [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 5432, "protocol": "TCP"}]}]
    # Without `to`, a destination is allowed on its ports only.
    assert all(rule.get("ports") for rule in by_kind(minimal, "NetworkPolicy")["portal-gpu-portal"]["spec"]["egress"])


def test_the_prometheus_rule_carries_deploy_prometheus_rules_and_the_scrape_its_bearer_token(rendered, minimal):
    groups = [group for name in ("recording_rules.yaml", "alerting_rules.yaml")
              for group in yaml.safe_load((ROOT / "deploy" / "prometheus" / name).read_text())["groups"]]
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rules == {"groups": groups}, "files/prometheus-rules.yaml is stale: run `make chart-rules`"
    assert by_kind(rendered, "PrometheusRule")["portal-gpu-portal"]["spec"] == rules
    (endpoint,) = by_kind(rendered, "ServiceMonitor")["portal-gpu-portal"]["spec"]["endpoints"]
    assert endpoint["authorization"]["credentials"] == {"name": "gpu-portal-metrics", "key": "token"}
    assert not {"ServiceMonitor", "PrometheusRule"} & {obj["kind"] for obj in minimal}


@pytest.mark.django_db
def test_the_declared_catalog_is_loaded_by_a_hook_job_after_the_migrations(minimal, monkeypatch):
    from django.core.management import call_command

    from tenants.models import Flavor

    catalog = [{"preset": "nvidia-h100", "capacity_units": 64}, {"preset": "nvidia-mig-1g.10gb", "capacity_units": 56},
               {"preset": "cpu-4c-16g", "capacity_units": 32, "resource_per_unit": 8, "memory_gib_per_unit": 32}]
    objects = render(merged({"catalog": catalog}))
    job = by_kind(objects, "Job")["portal-gpu-portal-catalog"]
    migrate = by_kind(objects, "Job")["portal-gpu-portal-migrate"]
    hook, after = job["metadata"]["annotations"], migrate["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == after["helm.sh/hook"] and int(hook["helm.sh/hook-weight"]) > int(after["helm.sh/hook-weight"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "catalog_apply", "--env", "PORTAL_CATALOG"]
    # What the Job hands the command loads the flavors the values name.
    monkeypatch.setenv("PORTAL_CATALOG", container_env(container, SECRETS)["PORTAL_CATALOG"])
    call_command("catalog_apply", env="PORTAL_CATALOG")
    assert dict(Flavor.objects.values_list("slug", "capacity_units")) == {"h100-80gb": 64, "a100-mig-1g-10gb": 56,
                                                                          "cpu-4c-16g": 32}
    cpu = Flavor.objects.get(slug="cpu-4c-16g")
    assert (cpu.is_cpu, cpu.resource_per_unit, cpu.memory_gib_per_unit) == (True, 8, 32)
    assert "portal-gpu-portal-catalog" not in by_kind(minimal, "Job")  # nothing declared, no Job
    bad = run_helm("template", "portal", str(CHART), values=merged({"catalog": [{"preset": "nvidia-h100", "capacity": 8}]}),
                   check=False)
    assert bad.returncode != 0 and "capacity" in bad.stderr, bad.stderr
    # Every field catalog_apply takes may be declared in the values, and nothing else.
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["catalog"]["items"]["properties"]) == set(tenant_services.CATALOG_FIELDS)
