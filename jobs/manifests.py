"""The kit every workload kind builds its objects with (jobs/kinds/): pure functions of plain data.

Users never write pod specs. Everything a pod gets is decided here: a restricted security
context, no service-account token, GPU limits equal to requests under the flavor's resource
name, and the node placement of the flavors the launch accepts (Placement): a pod that names one
flavor can be admitted on that flavor only, even where another flavor shares its resource name.
What a user typed reaches the pod only as values of the template's declared parameters, as
arguments and environment.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from portal.kube import ObjectRef
from portal.security import GATEWAY_GATE_PREFIX
from tenants.manifests import HTTP_PORT_NAME, WORKLOAD_KIND_LABEL, TierName

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
TEAM_LABEL = "gpu-portal.io/team"
WORKLOAD_LABEL = "gpu-portal.io/workload"
TTL_AFTER_FINISHED = 24 * 3600
NGINX = "nginx.ingress.kubernetes.io"
CLUSTER_ISSUER_ANNOTATION = "cert-manager.io/cluster-issuer"
# What the portal's gate answers that reaches the workload: who called, and the caller's
# Authorization header with a portal API token taken out (see jobs/access.py).
AUTH_RESPONSE_HEADERS = "X-Portal-User, Authorization"


@dataclass(frozen=True)
class IngressSpec:
    """How an inference server or notebook is reached from outside: its host, the ingress class,
    TLS from a wildcard certificate's Secret or from a cert-manager ClusterIssuer (or none), and
    the portal's gate in front (ingress-nginx external authentication)."""

    host: str
    class_name: str = ""
    tls_secret: str = ""  # a Secret of that name holds a certificate for the host, in the team's namespace
    cluster_issuer: str = ""  # cert-manager issues a certificate per host into <name>-tls
    auth_url: str = ""  # asked before every request: 200 lets it through, 401 / 403 do not
    signin_url: str = ""  # where a browser answered 401 is sent to sign in
    # Gateway API instead: the Gateway (namespace, name[, listener]) an HTTPRoute attaches to, and
    # the portal's Service (namespace, name, port) its ExternalAuth filter asks (None: the gateway
    # itself asks the gate, or nothing does).
    gateway: tuple[str, ...] = ()
    auth_service: tuple[str, str, int] | None = None

    @property
    def tls(self) -> bool:
        return bool(self.tls_secret or self.cluster_issuer)


@dataclass(frozen=True)
class Placement:
    """Where one flavor's pods run: the labels of its nodes, the tolerations for their taints and
    the RuntimeClass its node pool's container runtime needs to hand a pod its GPUs (empty: the
    node's default runtime).

    Kueue admits a workload only on a flavor whose node labels its pods' node selector or
    required node affinity accepts (for the label keys the queue's flavors use), so the pod
    template carrying these is what holds a launch to the flavor it names."""

    node_labels: tuple[tuple[str, str], ...]
    tolerations: tuple[dict[str, Any], ...] = ()
    runtime_class: str = ""


@dataclass(frozen=True)
class VolumeMount:
    """One of the team's PersistentVolumeClaims, mounted where the template says."""

    claim: str
    mount_path: str
    read_only: bool = True


@dataclass(frozen=True)
class GitSource:
    """A repository an init container fetches into an emptyDir the workload sees at mount_path."""

    url: str
    revision: str
    mount_path: str


@dataclass(frozen=True)
class CredentialMount:
    """One of the team's credentials a launch chose: an S3 key becomes the container's AWS_*
    variables, a git deploy key files at mount_path (read by its owner only), a registry login
    the pod's image pull secret."""

    secret_name: str
    kind: str  # s3, git-ssh or registry
    mount_path: str = ""


# The fetch is one fixed script: the URL and revision reach it only as environment variables,
# expanded inside double quotes (never parsed as shell), after `--` (never read as options).
GIT_FETCH_SCRIPT = ('set -eu\ncd "$REPO_PATH"\ngit init -q .\n'
                    'git fetch -q --depth 1 -- "$REPO_URL" "$REPO_REVISION"\ngit checkout -q --detach FETCH_HEAD\n')
GIT_FETCH_PATH = "/repo"
# Git reads these as command-line configuration: https only (no file://, ssh or ext:: transport,
# whatever a redirect or submodule says), and the emptyDir, owned by root, is a safe directory.
GIT_FETCH_ENV = (
    ("GIT_TERMINAL_PROMPT", "0"), ("GIT_CONFIG_NOSYSTEM", "1"), ("HOME", "/tmp"),
    ("GIT_CONFIG_COUNT", "3"), ("GIT_CONFIG_KEY_0", "protocol.allow"), ("GIT_CONFIG_VALUE_0", "never"),
    ("GIT_CONFIG_KEY_1", "protocol.https.allow"), ("GIT_CONFIG_VALUE_1", "always"),
    ("GIT_CONFIG_KEY_2", "safe.directory"), ("GIT_CONFIG_VALUE_2", GIT_FETCH_PATH),
)
GIT_FETCH_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
GIT_CHECKOUT_SIZE_LIMIT = "4Gi"
RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class WorkloadSpec:
    workload_id: int
    name: str  # the Kubernetes name, e.g. wl-42
    namespace: str
    team: str
    kind: str  # a registered kind's name (jobs.kinds): its container's name and its pods' kind label
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    # What each pod asks its device plugins for (Flavor.pod_requests of its units), e.g.
    # (("nvidia.com/gpu", 2),) or a cGPU unit's memory and compute.
    gpu: tuple[tuple[str, int], ...]
    # Where the flavor is a DRA DeviceClass: (the class, devices per pod), claimed through the
    # workload's ResourceClaimTemplate instead of `gpu`.
    claim: tuple[str, int] | None = None
    workers: int = 1
    cpu: int = 4
    memory_gib: int = 16
    priority: TierName = "normal"
    max_runtime_seconds: int = 24 * 3600
    port: int = 0
    storage_gib: int = 0
    notebook_token: str = ""
    ingress: IngressSpec | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    volumes: tuple[VolumeMount, ...] = ()
    repositories: tuple[GitSource, ...] = ()
    credentials: tuple[CredentialMount, ...] = ()
    git_image: str = ""  # the site's image for fetching repositories (PORTAL_GIT_IMAGE)
    # The flavors the launch accepts, the one it names first: one is a node selector, several
    # are alternatives (one node-affinity term each) of which Kueue admits the first with room.
    placements: tuple[Placement, ...] = ()
    # What the queue backend marks the queued object with (its team queue and priority tier:
    # tenants.queueing's workload_labels).
    queue: tuple[tuple[str, str], ...] = ()
    # The team's queue (TeamSpec.cluster_queue) and the flavor its launch named (its slug), for a
    # queue backend that shapes the workload's objects (tenants.queueing's shape).
    team_queue: str = ""
    flavor: str = ""
    # How its numbered pods are named by the object that owns them on the site's queue backend
    # (QueueBackend.indexed_pod_name): how a distributed training's workers find the first.
    indexed_pod_name: str = "{name}-{index}"

    @property
    def labels(self) -> dict[str, str]:
        return {MANAGED_BY_LABEL: "gpu-portal", TEAM_LABEL: self.team, WORKLOAD_LABEL: str(self.workload_id)}

    @property
    def queue_labels(self) -> dict[str, str]:
        return {**self.labels, **dict(self.queue)}

    @property
    def service_name(self) -> str:
        return self.name

    def pod_host(self, index: int) -> str:
        """The host name of its pod of that index, in its headless Service's subdomain."""
        return f"{self.indexed_pod_name.format(name=self.name, index=index)}.{self.service_name}"

    @property
    def token_secret_name(self) -> str:
        return f"{self.name}-token"


def meta(spec: WorkloadSpec, labels: dict[str, str], name: str | None = None) -> dict[str, Any]:
    return {"name": name or spec.name, "namespace": spec.namespace, "labels": labels}


def container(
    spec: WorkloadSpec, *, extra_env: tuple[tuple[str, str], ...] = (), secret_env: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    resources = {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi", **{name: str(amount) for name, amount in spec.gpu}}
    main: dict[str, Any] = {
        "name": spec.kind,
        "image": spec.image,
        "env": [*({"name": k, "value": v} for k, v in (*spec.env, *extra_env)), *secret_env],
        "resources": {"requests": dict(resources), "limits": dict(resources),
                      **({"claims": [{"name": CLAIM_NAME}]} if spec.claim else {})},
        "securityContext": _restricted(),
    }
    mounts = [*({"name": f"data-{index}", "mountPath": volume.mount_path, "readOnly": volume.read_only}
                for index, volume in enumerate(spec.volumes)),
              *({"name": f"repo-{index}", "mountPath": repo.mount_path} for index, repo in enumerate(spec.repositories)),
              *({"name": f"key-{index}", "mountPath": key.mount_path, "readOnly": True}
                for index, key in enumerate(spec.credentials) if key.kind == "git-ssh")]
    if mounts:
        main["volumeMounts"] = mounts
    variables = [{"secretRef": {"name": key.secret_name}} for key in spec.credentials if key.kind == "s3"]
    if variables:
        main["envFrom"] = variables
    if spec.command:
        main["command"] = list(spec.command)
    if spec.args:
        main["args"] = list(spec.args)
    if spec.port:
        main["ports"] = [{"name": HTTP_PORT_NAME, "containerPort": spec.port}]
    return main


def _restricted() -> dict[str, Any]:
    return copy.deepcopy(RESTRICTED_CONTAINER)


def _git_fetch(spec: WorkloadSpec, index: int, repo: GitSource) -> dict[str, Any]:
    variables = (("REPO_URL", repo.url), ("REPO_REVISION", repo.revision), ("REPO_PATH", GIT_FETCH_PATH), *GIT_FETCH_ENV)
    return {
        "name": f"fetch-repo-{index}",
        "image": spec.git_image,
        "command": ["sh", "-c", GIT_FETCH_SCRIPT],
        "env": [{"name": name, "value": value} for name, value in variables],
        "volumeMounts": [{"name": f"repo-{index}", "mountPath": GIT_FETCH_PATH}],
        "resources": {"requests": dict(GIT_FETCH_RESOURCES), "limits": dict(GIT_FETCH_RESOURCES)},
        "securityContext": _restricted(),
    }


def _pod_volumes(spec: WorkloadSpec) -> dict[str, Any]:
    """The chosen claims, the repositories' emptyDirs and the init containers that fill them, the
    deploy keys' Secrets (files only the pod's user reads) and the registry logins to pull with."""
    volumes = [*({"name": f"data-{index}", "persistentVolumeClaim": {"claimName": volume.claim, "readOnly": volume.read_only}}
                 for index, volume in enumerate(spec.volumes)),
               *({"name": f"repo-{index}", "emptyDir": {"sizeLimit": GIT_CHECKOUT_SIZE_LIMIT}}
                 for index, _ in enumerate(spec.repositories)),
               *({"name": f"key-{index}", "secret": {"secretName": key.secret_name, "defaultMode": 0o400}}
                 for index, key in enumerate(spec.credentials) if key.kind == "git-ssh")]
    extra: dict[str, Any] = {"volumes": volumes} if volumes else {}
    pulls = [{"name": key.secret_name} for key in spec.credentials if key.kind == "registry"]
    if pulls:
        extra["imagePullSecrets"] = pulls
    if spec.repositories:
        extra["initContainers"] = [_git_fetch(spec, index, repo) for index, repo in enumerate(spec.repositories)]
    return extra


def _placement(placements: tuple[Placement, ...]) -> dict[str, Any]:
    """The pod spec fields that hold a workload to its flavors: a node selector for one, a
    required node affinity with one term per flavor for several; the tolerations of all, and
    their runtime class. A pod has one runtime class, so flavors accepted together share it
    (jobs.services refuses a launch whose flavors differ in it, in words)."""
    if not placements:
        return {}
    runtime_classes = {placement.runtime_class for placement in placements}
    if len(runtime_classes) > 1:
        raise ValueError(f"flavors accepted together name different runtime classes: {sorted(runtime_classes)}")
    fields: dict[str, Any] = {}
    if len(placements) == 1:
        if placements[0].node_labels:
            fields["nodeSelector"] = dict(placements[0].node_labels)
    else:
        terms = [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}
                                       for key, value in placement.node_labels]} for placement in placements]
        fields["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    tolerations: list[dict[str, Any]] = []
    for placement in placements:
        tolerations += [dict(t) for t in placement.tolerations if dict(t) not in tolerations]
    if tolerations:
        fields["tolerations"] = tolerations
    if runtime_class := runtime_classes.pop():
        fields["runtimeClassName"] = runtime_class
    return fields


def pod_template(spec: WorkloadSpec, main: dict[str, Any], *, restart: str, **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "priorityClassName": f"gpu-portal-{spec.priority}",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "restartPolicy": restart,
        "containers": [main],
        **_pod_volumes(spec),
        **_placement(spec.placements),
        **({"resourceClaims": [{"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(spec)}]}
           if spec.claim else {}),
        **extra,
    }
    # The kind tells the team's network policies which pods the portal and the ingress controller may reach.
    metadata: dict[str, Any] = {"labels": {**spec.labels, WORKLOAD_KIND_LABEL: spec.kind}}
    if spec.annotations:
        metadata["annotations"] = dict(spec.annotations)
    return {"metadata": metadata, "spec": pod}


# A pod's claim on its GPUs where its flavor is a DRA DeviceClass: each pod gets a ResourceClaim of
# its own, made by Kubernetes from the workload's template and deleted with the pod.
CLAIM_NAME = "gpu"
RESOURCE_API = "resource.k8s.io/v1"


def claim_template_name(spec: WorkloadSpec) -> str:
    return f"{spec.name}-gpu"


def claim_templates(spec: WorkloadSpec) -> list[dict[str, Any]]:
    """The workload's ResourceClaimTemplate, where its flavor is a DeviceClass: exactly its units of
    the class's devices per pod."""
    if spec.claim is None:
        return []
    device_class, count = spec.claim
    request = {"name": CLAIM_NAME, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                               "count": count}}
    return [{"apiVersion": RESOURCE_API, "kind": "ResourceClaimTemplate",
             "metadata": meta(spec, spec.labels, name=claim_template_name(spec)),
             "spec": {"spec": {"devices": {"requests": [request]}}}}]


def http_service(spec: WorkloadSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(spec, spec.labels),
        "spec": {"selector": {WORKLOAD_LABEL: str(spec.workload_id)},
                 "ports": [{"name": HTTP_PORT_NAME, "port": 80, "targetPort": spec.port}]},
    }


def route_object(spec: WorkloadSpec, ingress: IngressSpec) -> dict[str, Any]:
    """How the workload is reached from outside: an HTTPRoute where the site routes through a
    Gateway, else an Ingress."""
    return http_route_object(spec, ingress) if ingress.gateway else ingress_object(spec, ingress)


def route_refs(spec: WorkloadSpec) -> tuple[ObjectRef, ObjectRef]:
    """Both kinds of route the workload may have had, by name."""
    return (ObjectRef("networking.k8s.io/v1", "Ingress", spec.name, spec.namespace),
            ObjectRef(GATEWAY_API, "HTTPRoute", spec.name, spec.namespace))


GATEWAY_API = "gateway.networking.k8s.io/v1"
# A conformant gateway sends the gate (GATEWAY_GATE_PREFIX, jobs/views.py's workload_gateway_gate)
# the request's method and its path after the prefix, with its Host, Authorization and these headers.
GATEWAY_AUTH_REQUEST_HEADERS = ("Cookie", "Accept")
# What the gate's 200 puts on the request to the workload: who called, and an Authorization
# header always (empty where the caller's portal token or endpoint key was taken out).
GATEWAY_AUTH_RESPONSE_HEADERS = ("X-Portal-User", "Authorization")


def http_route_object(spec: WorkloadSpec, ingress: IngressSpec) -> dict[str, Any]:
    """A Gateway API HTTPRoute for the workload's host on the site's Gateway, every path to its
    Service, behind the standard ExternalAuth filter (HTTP) to the portal's gate where the site
    names the portal's Service. TLS is the Gateway listener's (a route has none)."""
    namespace, name, *listener = ingress.gateway
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": namespace, "name": name}
    if listener:
        parent["sectionName"] = listener[0]
    rule: dict[str, Any] = {
        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
        "backendRefs": [{"name": spec.service_name, "port": 80}],
    }
    if ingress.auth_service is not None:
        auth_namespace, auth_name, auth_port = ingress.auth_service
        rule["filters"] = [{"type": "ExternalAuth", "externalAuth": {
            "protocol": "HTTP",
            "backendRef": {"name": auth_name, "namespace": auth_namespace, "port": auth_port},
            "http": {"path": GATEWAY_GATE_PREFIX, "allowedHeaders": list(GATEWAY_AUTH_REQUEST_HEADERS),
                     "allowedResponseHeaders": list(GATEWAY_AUTH_RESPONSE_HEADERS)},
        }}]
    return {"apiVersion": GATEWAY_API, "kind": "HTTPRoute", "metadata": meta(spec, spec.labels),
            "spec": {"parentRefs": [parent], "hostnames": [ingress.host], "rules": [rule]}}


def ingress_object(spec: WorkloadSpec, ingress: IngressSpec) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if ingress.auth_url:
        annotations[f"{NGINX}/auth-url"] = ingress.auth_url
        annotations[f"{NGINX}/auth-response-headers"] = AUTH_RESPONSE_HEADERS
    if ingress.signin_url:
        annotations[f"{NGINX}/auth-signin"] = ingress.signin_url
    if ingress.cluster_issuer:
        annotations[CLUSTER_ISSUER_ANNOTATION] = ingress.cluster_issuer
    metadata = meta(spec, spec.labels)
    if annotations:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"rules": [{"host": ingress.host, "http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": spec.service_name, "port": {"name": HTTP_PORT_NAME}}},
    }]}}]}
    if ingress.class_name:
        body = {"ingressClassName": ingress.class_name, **body}
    if ingress.tls:
        body["tls"] = [{"hosts": [ingress.host], "secretName": ingress.tls_secret or f"{spec.name}-tls"}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": body}
