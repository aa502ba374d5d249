"""The Helm chart on the real control plane (its pods are KWOK fakes): installed once for the
module, every rendered object accepted, the migration hook run first, then the contract suite's
provisioning, launch, sync and teardown scenarios run through the gateway authenticated as the
chart's ServiceAccount (a TokenRequest token), what that identity must not do refused, and an
upgrade and an uninstall that leave nothing behind."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
import yaml
from kubernetes import client as k8s_client

from portal.kube import KubeError, ObjectRef, reset_gateway
from portal.kube.base import KindLists
from portal.kube.kubernetes import KubernetesGateway
from tenants import nodes
from tenants import services as tenant_services
from tenants.models import GpuNode
from tests.cluster.harness import ControlPlaneError
from tests.contract import test_workload_contract as workload_contract
from tests.contract.conftest import ClusterUnderTest
from tests.contract.test_credentials_contract import (  # noqa: F401 - collected here, run as the chart's account
    test_credentials_are_kept_rotated_mounted_and_deleted_as_the_teams_secrets,
)
from tests.contract.test_tenancy_contract import (  # noqa: F401
    test_deleting_a_team_leaves_no_object_behind,
    test_provisioning_a_team_creates_exactly_its_objects_and_kueue_accepts_them,
    test_the_members_role_binding_names_sso_members_by_subject_and_no_local_account,
    test_the_periodic_pass_repairs_drift_and_then_writes_nothing,
)
from tests.contract.test_watch_contract import (  # noqa: F401
    test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval,
)
from tests.contract.test_workload_contract import (  # noqa: F401
    test_a_training_job_runs_to_success_and_its_interval_is_recorded_once,
    test_stopping_removes_every_object_and_ends_the_interval,
)
from tests.deploy.chart import CHART, helm, merged, operator_crds, render
from tests.deploy.test_chart import EVERYTHING_ON
from tests.helpers import wait_for

# No database mark here: the scenarios reach it through `cluster`, and pytest-django runs tests
# without a database last, so the install's own tests, the upgrade and the uninstall come after them.
pytestmark = [pytest.mark.cluster]
# The watch scenario keeps its own module's marks: its threads need PostgreSQL and real transactions.
test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval = pytest.mark.services(
    pytest.mark.django_db(transaction=True)(
        test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval))

SECRETS = {"gpu-portal-secret-key": ("secret-key", "k" * 64), "gpu-portal-database": ("url", "postgres://p:pw@db:5432/p"),
           "gpu-portal-redis": ("url", "redis://redis:6379/0"), "gpu-portal-metrics": ("token", "m" * 32),
           "oidc": ("client-secret", "s")}
# Everything the chart may make, for "nothing left behind".
KINDS = ("deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,networkpolicies,"
         "poddisruptionbudgets,horizontalpodautoscalers,ingresses,jobs,leases,secrets,configmaps")
CLUSTER_KINDS = "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings"


class Release:
    def __init__(self, control_plane: Any, *overrides: dict[str, Any]) -> None:
        self.control_plane = control_plane
        suffix = uuid.uuid4().hex[:6]
        self.name, self.namespace = f"portal-{suffix}", f"gpu-portal-{suffix}"
        self.fullname = f"{self.name}-gpu-portal"
        self.node = f"{self.name}-node"
        # Its pods stay on a node of their own, away from the GPU nodes other tests count on.
        self.values = merged({"web": {"replicas": 1}, "watcher": {"replicas": 2},
                              "nodeSelector": {"gpu-portal.io/chart-test": self.name}}, *overrides)

    def helm(self, *args: str, values: dict[str, Any] | None = None, check: bool = True) -> str:
        command = [helm(), *args, "--namespace", self.namespace, "--kubeconfig", str(self.control_plane.kubeconfig_path)]
        if values is not None:
            command += ["--values", "-"]
        result = subprocess.run(command, input=json.dumps(values) if values is not None else None,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 or not check, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result.stdout if result.returncode == 0 else ""

    def installed(self) -> bool:
        return bool(self.helm("status", self.name, check=False))

    def kubectl(self, *args: str, **kwargs: Any) -> str:
        return self.control_plane.kubectl(*args, **kwargs)

    def policy_in_force(self) -> bool:
        """Whether the chart's admission policy refuses, as the portal's account, a write outside
        the team namespaces (a server-side dry run: nothing is stored either way)."""
        try:
            self.kubectl("create", "deployment", f"{self.name}-probe", "--image=busybox", "-n", "kube-system",
                         "--dry-run=server", f"--as=system:serviceaccount:{self.namespace}:{self.fullname}")
        except ControlPlaneError as refusal:
            return "writes only in the namespaces it made for teams" in str(refusal)
        return False

    def status(self) -> dict[str, Any]:
        return json.loads(self.helm("status", self.name, "-o", "json"))

    def leftovers(self) -> list[str]:
        selector = f"app.kubernetes.io/instance={self.name}"
        found = self.kubectl("get", KINDS, "-n", self.namespace, "-l", selector, "-o", "name").split()
        found += self.kubectl("get", CLUSTER_KINDS, "-l", selector, "-o", "name").split()
        # helm's own records of the release
        found += self.kubectl("get", "secrets", "-n", self.namespace, "-l", f"owner=helm,name={self.name}", "-o", "name").split()
        return found


@pytest.fixture(scope="module")
def release(control_plane) -> Iterator[Release]:
    yield from installed(Release(control_plane))


def installed(release: Release) -> Iterator[Release]:
    """The release installed until the module is done with it, then uninstalled."""
    control_plane = release.control_plane
    # Pod Security `restricted` enforced, as a careful site would: every pod of the chart must pass.
    release.kubectl("create", "namespace", release.namespace)
    release.kubectl("label", "namespace", release.namespace, "pod-security.kubernetes.io/enforce=restricted")
    for name, (key, value) in SECRETS.items():
        release.kubectl("create", "secret", "generic", name, "-n", release.namespace, f"--from-literal={key}={value}")
    control_plane.add_gpu_node(release.node, labels={"gpu-portal.io/chart-test": release.name}, allocatable={})
    release.helm("install", release.name, str(CHART), values=release.values)
    # helm returns before the API server has loaded the chart's ValidatingAdmissionPolicy (it
    # compiles policies in the background; in one CI run a write a second later still passed):
    # the tests meet the install once the policy is in force, as a site does a moment later.
    wait_for(release.policy_in_force, what="the chart's admission policy to be in force", timeout=30, interval=0.25)
    try:
        yield release
    finally:
        if release.installed():  # the last test uninstalls; a narrower selection leaves it to here
            release.helm("uninstall", release.name, "--wait")
        release.kubectl("delete", "namespace", release.namespace, "--wait=false", check=False)
        control_plane.delete_node(release.node)


@pytest.fixture(scope="module")
def portal_gateway(release) -> KubernetesGateway:
    return account_gateway(release)


def account_gateway(release: Release) -> KubernetesGateway:
    """The gateway as the portal's pods have it: the chart's ServiceAccount, with a token from the TokenRequest API."""
    token = release.kubectl("create", "token", release.fullname, "-n", release.namespace, "--duration=2h").strip()
    configuration = k8s_client.Configuration()
    configuration.host = release.control_plane.server
    configuration.ssl_ca_cert = str(release.control_plane.workdir / "pki" / "ca.crt")
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return KubernetesGateway(configuration)


class AsThePortal:
    """Every call the portal's code makes goes with the chart's account; the tests' own probes
    (reading back what the portal made, a stand-in Job) with the admin's, as an onlooker's would.
    The portal never reads a Secret, say, but a scenario checks that a notebook's token is there."""

    def __init__(self, portal: KubernetesGateway, admin: KubernetesGateway) -> None:
        self.portal, self.admin = portal, admin

    def _as(self) -> KubernetesGateway:
        caller = sys._getframe(2).f_globals.get("__name__", "")
        return self.admin if caller.startswith("tests.") else self.portal

    def cluster_now(self) -> dt.datetime:
        return self.portal.cluster_now()

    def apply(self, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._as().apply(obj, **kwargs)

    def dry_run(self, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._as().dry_run(obj, **kwargs)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._as().create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._as().replace(obj)

    def delete(self, ref: ObjectRef) -> None:
        self._as().delete(ref)

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self._as().get(ref)

    def list(self, api_version: str, kind: str, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        return self._as().list(api_version, kind, **kwargs)

    def list_kinds(self, kinds: Any, **kwargs: Any) -> KindLists:
        return self._as().list_kinds(kinds, **kwargs)

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[Any]:
        return self._as().watch(api_version, kind, **kwargs)

    def pod_logs(self, **kwargs: Any) -> str:
        return self._as().pod_logs(**kwargs)

    def read_subresource(self, ref: Any, subresource: str, **kwargs: Any) -> Any:
        return self._as().read_subresource(ref, subresource, **kwargs)

    def expect_nodes(self, nodes: Any) -> None:
        """A real cluster has its own nodes."""

    def tick(self) -> None:
        """A real cluster moves by itself."""


@pytest.fixture
def cluster(request, settings, db, release, portal_gateway, control_plane):
    """The contract suite's `cluster`, on the real control plane, as the chart's ServiceAccount."""
    yield from as_the_chart_account(settings, release, portal_gateway)


def as_the_chart_account(settings: Any, release: Release, portal_gateway: KubernetesGateway) -> Iterator[ClusterUnderTest]:
    """The cluster under test as the release's ServiceAccount, with the settings its chart gives."""
    control_plane = release.control_plane
    admin = KubernetesGateway.from_kubeconfig(str(control_plane.kubeconfig_path))
    under_test = ClusterUnderTest("real", AsThePortal(portal_gateway, admin), control_plane)
    settings.PORTAL_COHORT = under_test.unique("cohort")
    settings.PORTAL_MEMBER_CLUSTER_ROLE = f"{release.fullname}-member"
    reset_gateway(under_test.gateway)
    yield under_test
    reset_gateway(None)


@pytest.mark.parametrize("kind", ["inference", "notebook", "workspace"])  # training and distributed: the two scenarios above
def test_every_kind_is_accepted_and_runs_on_a_node_of_its_flavor(cluster, site, templates, kind, settings,
                                                                 django_capture_on_commit_callbacks):
    workload_contract.test_every_kind_is_accepted_and_runs_on_a_node_of_its_flavor(
        cluster, site, templates, kind, settings, django_capture_on_commit_callbacks)


def test_the_portals_account_reads_the_nodes_behind_the_catalog(cluster, site):
    # The node check lists Nodes every minute as this account: the chart's ClusterRole must allow it.
    verdict = nodes.check_flavors(flavors=[site.flavor])[site.flavor.pk]
    assert (verdict.problem, verdict.nodes, verdict.offered) == ("", 1, 8)
    # A platform admin's cordon patches the node as this account, and makes it schedulable again.
    node = GpuNode.objects.get(name=cluster.unique("gpu-node"))
    for cordoned in (True, False):
        tenant_services.node_cordon(actor=site.admin, node=node, cordoned=cordoned)
        assert bool(nodes.check_flavors(flavors=[site.flavor])[site.flavor.pk].offered == 0) is cordoned


# --- The install ---------------------------------------------------------------------------------


def test_every_rendered_object_is_accepted_by_the_136_api_server_for_each_value_set(release):
    # A server-side dry run is the API server's own validation (strict: an unknown field fails),
    # admission included; the monitoring objects against the Prometheus operator's own CRDs.
    crds = sorted(str(path) for path in operator_crds().glob("*.yaml"))
    for path in crds:
        release.kubectl("apply", "--server-side", "-f", path)
    try:
        for path in crds:
            release.kubectl("wait", "--for=condition=Established", "--timeout=30s", "-f", path)
        for name, values in (("required", merged()), ("everything", merged(EVERYTHING_ON))):
            objects = render(values, release="dryrun", namespace=release.namespace)
            out = release.kubectl("apply", "--dry-run=server", "--server-side", "--field-manager=chart-test",
                                  "-n", release.namespace, "-f", "-", input=yaml.safe_dump_all(objects))
            assert len(out.strip().splitlines()) == len(objects), (name, out)
        kinds = {obj["kind"] for obj in objects}
        assert {"ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler", "ValidatingAdmissionPolicy"} <= kinds
    finally:
        for path in crds:
            release.kubectl("delete", "--wait=false", "-f", path)


def test_the_install_creates_every_object_after_its_migration_hook(release):
    status = release.status()
    assert status["info"]["status"] == "deployed"
    (hook,) = status["hooks"]
    assert (hook["kind"], hook["name"]) == ("Job", f"{release.fullname}-migrate")
    assert hook["last_run"]["phase"] == "Succeeded"
    manifest = [doc for doc in yaml.safe_load_all(release.helm("get", "manifest", release.name)) if doc]
    for obj in manifest:
        namespace = ["-n", release.namespace] if obj["kind"] not in (
            "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") else []
        release.kubectl("get", obj["kind"], obj["metadata"]["name"], *namespace, "-o", "name")
    # Every pod passed Pod Security `restricted` and found its ServiceAccount: each Deployment is available.
    deployments = [obj["metadata"]["name"] for obj in manifest if obj["kind"] == "Deployment"]
    assert len(deployments) == 4

    def available() -> bool:
        items = json.loads(release.kubectl("get", "deployments", "-n", release.namespace, "-o", "json"))["items"]
        return all(d["status"].get("availableReplicas") == d["spec"]["replicas"] for d in items) and len(items) == 4
    wait_for(available, what="every Deployment of the chart to be available", interval=0.25)


# --- What the portal's account must not do ------------------------------------------------------------


def _refused(call: Any) -> KubeError:
    with pytest.raises(KubeError) as refusal:
        call()
    assert refusal.value.status == 403, refusal.value
    return refusal.value


def test_the_portals_account_cannot_read_secrets_create_pods_in_kube_system_or_grant_cluster_admin(
    release, portal_gateway, control_plane,
):
    secret = ObjectRef("v1", "Secret", "gpu-portal-database", release.namespace)
    _refused(lambda: portal_gateway.get(secret))
    _refused(lambda: portal_gateway.list("v1", "Secret", namespace="kube-system"))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    _refused(lambda: portal_gateway.apply(pod))
    # Nor through a Deployment there (RBAC allows Deployments; the admission policy keeps them in team namespaces).
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sneaky", "namespace": "kube-system"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    assert "writes only in the namespaces it made for teams" in str(_refused(lambda: portal_gateway.apply(deployment)))
    # A Secret it may write in team namespaces, never elsewhere: a patch would otherwise answer with its data.
    overwrite = {"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "gpu-portal-database", "namespace": release.namespace}}
    _refused(lambda: portal_gateway.apply(overwrite))
    # Nor a data volume (it makes the teams' claims): another application's claim stays its own.
    volume = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "sneaky", "namespace": "kube-system"},
              "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    assert "writes only in the namespaces it made for teams" in str(_refused(lambda: portal_gateway.apply(volume)))
    # Nor claim a namespace it did not make.
    claim = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "kube-system", "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}}}
    assert "changes or deletes only those that carry it" in str(_refused(lambda: portal_gateway.apply(claim)))

    rbac = k8s_client.RbacAuthorizationV1Api(k8s_client.ApiClient(portal_gateway.configuration))
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": f"{release.name}-takeover"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": release.fullname, "namespace": release.namespace}]}
    with pytest.raises(k8s_client.ApiException) as refused:
        rbac.create_cluster_role_binding(cast(Any, binding))  # the client sends a dict as it is
    assert refused.value.status == 403


def test_in_a_team_namespace_the_portal_binds_its_member_role_but_nothing_it_does_not_hold(
    release, portal_gateway, control_plane,
):
    team = f"{release.name}-team"
    control_plane.kubectl("create", "namespace", team)
    control_plane.kubectl("label", "namespace", team, "app.kubernetes.io/managed-by=gpu-portal")
    try:
        def binding(role: str) -> dict[str, Any]:
            return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": f"to-{role}", "namespace": team,
                                 "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:someone"}]}
        portal_gateway.apply(binding(f"{release.fullname}-member"))
        for role in ("cluster-admin", "admin", "edit", "view"):  # each holds something the portal does not
            assert "not currently held" in str(_refused(lambda role=role: portal_gateway.apply(binding(role))))
        # In a team namespace it may write a Secret (a notebook's token), and still not read one.
        token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wl-1-token", "namespace": team,
                                                                   "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
                 "stringData": {"token": "t"}}
        portal_gateway.apply(token)
        _refused(lambda: portal_gateway.get(ObjectRef("v1", "Secret", "wl-1-token", team)))
        portal_gateway.delete(ObjectRef("v1", "Secret", "wl-1-token", team))
    finally:
        control_plane.kubectl("delete", "namespace", team, "--wait=false")


# --- Upgrade and uninstall: last, on the module's one install ------------------------------------------------


def test_an_upgrade_runs_the_migrations_again_and_an_uninstall_leaves_nothing_behind(release):
    first = release.status()["hooks"][0]["last_run"]["started_at"]
    changed = merged(release.values, {"settings": {"SESSION_IDLE_SECONDS": "3600"}})
    release.helm("upgrade", release.name, str(CHART), values=changed)
    status = release.status()
    assert (status["version"], status["info"]["status"]) == (2, "deployed")
    assert status["hooks"][0]["last_run"]["phase"] == "Succeeded" and status["hooks"][0]["last_run"]["started_at"] != first
    web = json.loads(release.kubectl("get", "deployment", f"{release.fullname}-web", "-n", release.namespace, "-o", "json"))
    env = {e["name"]: e.get("value") for e in web["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SESSION_IDLE_SECONDS"] == "3600"

    release.helm("uninstall", release.name, "--wait")
    wait_for(lambda: not release.leftovers(), what=f"nothing of {release.name} to be left", interval=0.25)
    # The Secrets the site made before installing are the site's, and stay.
    assert set(release.kubectl("get", "secrets", "-n", release.namespace, "-o", "name").split()) == {
        f"secret/{name}" for name in SECRETS}
