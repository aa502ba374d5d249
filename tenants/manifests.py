"""What a team and the GPU catalog become in the cluster: pure functions of plain data.

Nothing here imports Django or talks to a cluster; tests compare whole manifests.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, get_args

from tenants.catalog import UnitResource, quota_amounts

if TYPE_CHECKING:
    from tenants.queueing.base import QueueBackend

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "gpu-portal"
TEAM_LABEL = "gpu-portal.io/team"
ROLE_LABEL = "gpu-portal.io/role"
# The proof that the portal created an object for one team: the managed-by label plus this
# annotation holding the team's uid. A label alone could be copied by hand or left behind by a
# deleted team of the same slug; the uid is made once per team and never reused.
TEAM_UID_ANNOTATION = "gpu-portal.io/team-uid"
# What kind of workload a pod belongs to (jobs/manifests.py puts it on every pod): the team's
# network policies admit the portal and the ingress controller to some kinds only (KindReach).
WORKLOAD_KIND_LABEL = "gpu-portal.io/workload-kind"
# The name of the container port that serves HTTP on inference and notebook pods.
HTTP_PORT_NAME = "http"


TierName = Literal["low", "normal", "high"]
TIER_NAMES: tuple[TierName, ...] = get_args(TierName)


def tier_name(value: str) -> TierName:
    """A stored priority as a tier name, refusing one the cluster has no priority class for."""
    for name in TIER_NAMES:
        if value == name:
            return name
    raise ValueError(f"unknown priority tier {value!r}")


@dataclass(frozen=True)
class PriorityTier:
    name: TierName
    value: int
    description: str

    @property
    def object_name(self) -> str:
        return f"gpu-portal-{self.name}"


PRIORITY_TIERS = (
    PriorityTier("low", 100, "Preemptible: runs on idle capacity and gives way to everything else."),
    PriorityTier("normal", 1000, "The default for training and notebooks."),
    PriorityTier("high", 10000, "Deadlines and serving: may preempt lower tiers inside the team."),
)
# Pods never preempt other pods: kube-scheduler's preemption knows no teams or quotas, so a
# pending pod could evict another team's running one. Only the queue backend preempts (Kueue: by
# the workload's WorkloadPriorityClass and within the ClusterQueue's rules). Immutable in Kubernetes, as `value` is.
POD_PREEMPTION_POLICY = "Never"


@dataclass(frozen=True)
class FlavorSpec:
    name: str  # the ResourceFlavor name (the flavor's slug)
    resource_name: str
    capacity: int
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    # What one unit asks its device plugins for, its resource first (Flavor.unit_resources); none
    # given: one of `resource_name`.
    resources: tuple[UnitResource, ...] = ()
    # A DRA DeviceClass its pods claim devices of (its resource is then Kueue's name for the class)
    device_class: str = ""
    # A CPU-only flavor: its units are the pods' CPU and memory, which the queues leave to the
    # namespace's ResourceQuota (Kueue ignores them: IgnoreUndeclared), so a queue holds no quota of
    # it; the portal bounds a team's units of it at launch (jobs.services).
    cpu_only: bool = False

    @property
    def unit_resources(self) -> tuple[UnitResource, ...]:
        if self.cpu_only:
            return ()
        return self.resources or (UnitResource(self.resource_name),)

    def quota(self, units: int) -> dict[str, int]:
        """`units` units in each of its resources, as a queue's quota counts them."""
        return quota_amounts(self.unit_resources, units)


@dataclass(frozen=True)
class FlavorQuota:
    flavor: FlavorSpec
    nominal: int


def weight_quantity(weight: Decimal | int | str) -> str:
    """A fair-share weight as a Kubernetes quantity: Decimal("3.00") is "3", Decimal("0.50") "0.5"."""
    return format(Decimal(weight).normalize(), "f")


@dataclass(frozen=True)
class TeamPolicy:
    may_borrow: bool = True
    lends_idle: bool = True
    weight: str = "1"  # its fair-share weight, as a quantity (weight_quantity)
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 100
    workloads: int = 200  # objects of each workload kind: a backstop behind the portal's own count
    storage: tuple[tuple[str, int], ...] = ()  # (StorageClass, GiB) the team's volumes may ask for


def department_cohort(*, root: str, slug: str) -> str:
    """The name of a department's cohort, under the portal's: the one place it is derived."""
    return f"{root}-{slug}"


@dataclass(frozen=True)
class DepartmentSpec:
    """A department as the queue backend makes it: a cohort under the portal's (`parent`), which
    its teams' queues join. Its limits are units of each GPU flavor (None: no limit); its pool, the
    units of flavors (by name) it guarantees its teams together beyond their own quotas."""

    cohort: str
    parent: str
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: str = "1"  # against its sibling teams and departments (weight_quantity)
    pool: tuple[tuple[str, int], ...] = ()


def team_object_name(*, prefix: str, slug: str) -> str:
    """The name of a team's namespace and of its ClusterQueue: the one place it is derived."""
    return f"{prefix}{slug}"


# The cloud metadata service (AWS, GCP, Azure and others answer here; AWS also on IPv6). It hands
# out the node's credentials, so no allowance may ever reach it, whatever the settings say.
METADATA_NETWORKS = ("169.254.169.254/32", "fd00:ec2::254/128")
# What "private" means for the internet allowance: RFC 1918, shared address space (100.64/10),
# link-local and the IPv6 unique-local and link-local ranges. Pod, service and node addresses
# live here, so excluding them keeps "the internet" from meaning "every other team's pods".
PRIVATE_NETWORKS = (
    "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fe80::/10",
)
INTERNET_NETWORKS = ("0.0.0.0/0", "::/0")


@dataclass(frozen=True)
class NetworkSpec:
    """Who may talk to a team's pods, and whom they may reach, beyond each other.

    Ingress: the portal's pods (to notebooks, for the idle check) and the ingress controller (to
    inference servers and notebooks), both on the HTTP port only. Egress: DNS, then whatever the
    site allows: the internet (`internet`, private ranges left out unless `exclude_private` is
    off), extra networks (`cidrs`) and namespaces (`namespaces`). The metadata address is left
    out of every network, and a network inside it is refused (see `egress_ip_block`)."""

    portal_namespace: str = "gpu-portal"
    portal_pod_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "gpu-portal"),)
    dns_namespace: str = "kube-system"
    dns_pod_labels: tuple[tuple[str, str], ...] = (("k8s-app", "kube-dns"),)
    internet: bool = False
    exclude_private: bool = True
    cidrs: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()


def _ip_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as error:
        raise ValueError(f"“{text}” is not a network in CIDR notation such as 10.20.0.0/16 ({error}).") from None


def egress_ip_block(cidr: str, *, excluding: Iterable[str] = ()) -> dict[str, Any]:
    """An ipBlock peer for `cidr`, with `excluding` and the metadata address cut out where they
    fall inside it. A network that lies inside the metadata address is refused with ValueError:
    nothing of it could be allowed, and a policy must never be wider than the site meant."""
    network = _ip_network(cidr)
    cut = set()
    for text in (*excluding, *METADATA_NETWORKS):
        other = _ip_network(text)
        if other.version != network.version:
            continue
        if text in METADATA_NETWORKS and network.subnet_of(other):  # type: ignore[arg-type]
            raise ValueError(f"{cidr} is the cloud metadata address ({text}), which pods may never reach.")
        if other != network and other.subnet_of(network):  # type: ignore[arg-type]
            cut.add(other)
    block: dict[str, Any] = {"cidr": str(network)}
    if cut:
        block["except"] = [str(n) for n in sorted(cut, key=lambda n: (n.network_address, n.prefixlen))]
    return {"ipBlock": block}


def egress_allowance(*, network: NetworkSpec) -> list[dict[str, Any]]:
    """The peers the site allows beyond DNS and the team's own namespace, in a fixed order:
    extra namespaces, extra networks, then the internet."""
    peers: list[dict[str, Any]] = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}} for name in network.namespaces
    ]
    peers += [egress_ip_block(cidr) for cidr in network.cidrs]
    if network.internet:
        private = PRIVATE_NETWORKS if network.exclude_private else ()
        peers += [egress_ip_block(cidr, excluding=private) for cidr in INTERNET_NETWORKS]
    return peers


@dataclass(frozen=True)
class KindReach:
    """Which workload kinds, by the name on their pods' kind label, serve HTTP to the ingress
    controller and are asked by the portal itself how idle they are (jobs/kinds/ declares it)."""

    serving: tuple[str, ...] = ()
    portal_reached: tuple[str, ...] = ()


@dataclass(frozen=True)
class PortalReader:
    """The portal's own ServiceAccount and the ClusterRole of what it does only inside team
    namespaces (read pods, their logs and events, and data volumes; write a notebook's token)."""

    cluster_role: str
    service_account: str
    namespace: str  # the ServiceAccount's: the portal's own namespace


@dataclass(frozen=True)
class TeamSpec:
    slug: str
    quotas: tuple[FlavorQuota, ...]  # every active flavor, nominal 0 where the team has no grant
    uid: str  # the team's uid: written on every object as the proof that it is this team's
    # What the API server calls each active SSO member (their KUBE_OIDC_USERNAME_CLAIM), without
    # the prefix: local accounts have no cluster identity and are not among them.
    subjects: tuple[str, ...] = ()
    policy: TeamPolicy = TeamPolicy()
    cohort: str = "gpu-portal"
    ingress_namespace: str = "ingress-nginx"
    network: NetworkSpec = NetworkSpec()
    user_prefix: str = "oidc:"
    # The ClusterRole members are bound to in their namespace. The portal may bind only a role whose
    # every rule it holds itself (it has no `bind` verb): the chart's member role, or `view` for a
    # portal that holds all of `view`.
    member_role: str = "view"
    name_prefix: str = ""
    # A team provisioned before objects carried the uid: until its first apply annotates them,
    # objects with the managed-by label, its team label and no uid at all count as its own.
    adopts_unannotated: bool = False
    # Held by a hard-stopped budget: the team's queue admits nothing new; what runs continues.
    held: bool = False
    # The queues of the team's people (its members', and anyone's with work still in it), as the
    # backend names them (`QueueBackend.person_queue`): on Kueue each is a LocalQueue of its own.
    people: tuple[str, ...] = ()
    kinds: KindReach = KindReach()
    # Where the portal reads pods, logs, events and data volumes only in namespaces it made (the
    # chart's rbac.namespacedReads): its own ServiceAccount, bound in the team's namespace.
    portal_reader: PortalReader | None = None
    # Where workload routes ask the portal's gate through a Gateway (namespace, Service name):
    # a ReferenceGrant there lets the team's HTTPRoutes name that Service.
    gate_service: tuple[str, str] | None = None

    @property
    def namespace(self) -> str:
        return team_object_name(prefix=self.name_prefix, slug=self.slug)

    @property
    def cluster_queue(self) -> str:
        return team_object_name(prefix=self.name_prefix, slug=self.slug)

    @property
    def labels(self) -> dict[str, str]:
        return {MANAGED_BY_LABEL: MANAGER, TEAM_LABEL: self.slug}

    @property
    def annotations(self) -> dict[str, str]:
        return {TEAM_UID_ANNOTATION: self.uid}


def owned_by_team(obj: dict[str, Any], *, uid: str, slug: str = "", adopts_unannotated: bool = False) -> bool:
    """Whether a live object carries the proof that the portal created it for the team with this uid.

    Another team's uid, or none at all, is not proof: such an object is never adopted, changed
    or deleted (the one exception is a team from before the uid, see TeamSpec)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGER:
        return False
    found = (meta.get("annotations") or {}).get(TEAM_UID_ANNOTATION)
    if found is None:
        return adopts_unannotated and bool(slug) and labels.get(TEAM_LABEL) == slug
    return bool(uid) and found == uid


def platform_labels(role: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGER, ROLE_LABEL: role}


def _meta(
    name: str, labels: Mapping[str, str], namespace: str | None = None, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def team_meta(name: str, team: TeamSpec, *, namespaced: bool = True, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return _meta(name, team.labels if labels is None else labels, team.namespace if namespaced else None, team.annotations)


# --- What every team shares --------------------------------------------------------------------


def make_priority_class(*, tier: PriorityTier) -> dict[str, Any]:
    """The class pods name: it orders the scheduler's queue, and never evicts a pod (see POD_PREEMPTION_POLICY)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": _meta(tier.object_name, platform_labels("priority")),
        "value": tier.value, "globalDefault": False, "description": tier.description,
        "preemptionPolicy": POD_PREEMPTION_POLICY,
    }


def make_platform_objects(*, flavors: tuple[FlavorSpec, ...], queue: QueueBackend,
                          departments: tuple[DepartmentSpec, ...] = ()) -> list[dict[str, Any]]:
    """What every team shares: the queue backend's flavors, tiers and departments, then the pods'
    priority classes."""
    return [
        *queue.platform_objects(flavors=flavors, tiers=PRIORITY_TIERS, departments=departments),
        *(make_priority_class(tier=tier) for tier in PRIORITY_TIERS),
    ]


# --- A team's objects ----------------------------------------------------------------------------


def make_namespace(*, team: TeamSpec) -> dict[str, Any]:
    labels = {
        **team.labels,
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    metadata = team_meta(team.namespace, team, namespaced=False, labels=labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


# Each kind a workload creates, as ResourceQuota counts it; a workload makes at most one of each.
WORKLOAD_OBJECT_KINDS = ("jobs.batch", "deployments.apps", "statefulsets.apps", "services", "ingresses.networking.k8s.io")


def make_resource_quota(*, team: TeamSpec) -> dict[str, Any]:
    """The namespace's backstops: CPU, memory, pods and objects of each workload kind. No GPU
    resource: a queue's waiting work has pods (Volcano holds them; Kueue gates a server's
    replicas), which a ResourceQuota counts, so a GPU limit there refused pods the queue had
    admitted. The team's queue bounds its GPUs."""
    hard = {
        "requests.cpu": team.policy.cpu,
        "requests.memory": team.policy.memory,
        "pods": str(team.policy.pods),
        **{f"count/{kind}": str(team.policy.workloads) for kind in WORKLOAD_OBJECT_KINDS},
        **{storage_quota_key(name): f"{gib}Gi" for name, gib in team.policy.storage},
    }
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": team_meta("gpu-portal", team),
        "spec": {"hard": hard},
    }


def storage_quota_key(storage_class: str) -> str:
    """What a ResourceQuota calls the storage a namespace's claims of one class ask for."""
    return f"{storage_class}.storageclass.storage.k8s.io/requests.storage"


VOLUME_LABEL = "gpu-portal.io/volume"


@dataclass(frozen=True)
class VolumeSpec:
    name: str
    storage_class: str
    size_gib: int
    shared: bool = False


def make_volume_claim(*, team: TeamSpec, volume: VolumeSpec) -> dict[str, Any]:
    """A team's data volume. Only its requested size ever changes (it grows); the rest is fixed
    when it is made."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": team_meta(volume.name, team, labels={**team.labels, VOLUME_LABEL: volume.name}),
        "spec": {
            "storageClassName": volume.storage_class,
            "accessModes": ["ReadWriteMany" if volume.shared else "ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{volume.size_gib}Gi"}},
        },
    }


CREDENTIAL_LABEL = "gpu-portal.io/credential"
# What each kind of team credential keeps in its Secret: the Secret's type, and its keys.
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")
SSH_KEY, SSH_KNOWN_HOSTS = "ssh-privatekey", "known_hosts"
DOCKER_CONFIG = ".dockerconfigjson"
SECRET_TYPES = {"s3": "Opaque", "git-ssh": "kubernetes.io/ssh-auth", "registry": "kubernetes.io/dockerconfigjson"}


@dataclass(frozen=True)
class CredentialSpec:
    """A team credential's Secret: its name (the portal's, with a random part no one else names)
    and what it holds, key by key, as text."""

    name: str  # what launches name it by
    secret_name: str
    kind: str  # a key of SECRET_TYPES
    data: tuple[tuple[str, str], ...]


def make_credential_secret(*, team: TeamSpec, credential: CredentialSpec) -> dict[str, Any]:
    """A team credential: written by the portal, read only by the pods that mount it (members'
    view role reads no Secrets, and the portal itself may only write them)."""
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": team_meta(credential.secret_name, team, labels={**team.labels, CREDENTIAL_LABEL: credential.name}),
        "type": SECRET_TYPES[credential.kind],
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in credential.data},
    }


def make_limit_range(*, team: TeamSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": team_meta("gpu-portal", team),
        "spec": {"limits": [{
            "type": "Container",
            "default": {"cpu": "2", "memory": "8Gi"},
            "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
        }]},
    }


def _network_policy(name: str, team: TeamSpec, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": team_meta(name, team), "spec": spec}


def _http_port() -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": HTTP_PORT_NAME}]


def make_network_policy(*, team: TeamSpec) -> dict[str, Any]:
    """Default-deny ingress: a team's pods hear only each other. The two policies below open
    the HTTP port of some kinds to the portal and the ingress controller (policies add up)."""
    return _network_policy("gpu-portal-default-deny-ingress", team, {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    })


def make_egress_network_policy(*, team: TeamSpec) -> dict[str, Any]:
    """Default-deny egress: a team's pods reach DNS, each other, and what the site allows."""
    network = team.network
    dns: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": network.dns_namespace}}}
    if network.dns_pod_labels:
        dns["podSelector"] = {"matchLabels": dict(network.dns_pod_labels)}
    egress: list[dict[str, Any]] = [
        {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"podSelector": {}}]},
    ]
    allowance = egress_allowance(network=network)
    if allowance:
        egress.append({"to": allowance})
    return _network_policy("gpu-portal-default-deny-egress", team, {
        "podSelector": {}, "policyTypes": ["Egress"], "egress": egress,
    })


def _kind_selector(kinds: tuple[str, ...]) -> dict[str, Any]:
    """Pods of these kinds: by label for one, by set for several."""
    if len(kinds) == 1:
        return {"matchLabels": {WORKLOAD_KIND_LABEL: kinds[0]}}
    return {"matchExpressions": [{"key": WORKLOAD_KIND_LABEL, "operator": "In", "values": list(kinds)}]}


def make_portal_network_policy(*, team: TeamSpec) -> dict[str, Any]:
    """The portal's pods may ask a notebook how idle it is: those kinds' pods, HTTP port only."""
    peer: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.network.portal_namespace}},
    }
    if team.network.portal_pod_labels:
        peer["podSelector"] = {"matchLabels": dict(team.network.portal_pod_labels)}
    return _network_policy("gpu-portal-allow-portal", team, {
        "podSelector": _kind_selector(team.kinds.portal_reached),
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [peer], "ports": _http_port()}],
    })


def make_ingress_controller_network_policy(*, team: TeamSpec) -> dict[str, Any]:
    """The ingress controller reaches the kinds that serve HTTP (inference servers, notebooks), HTTP port only."""
    return _network_policy("gpu-portal-allow-ingress-controller", team, {
        "podSelector": {"matchExpressions": [{"key": WORKLOAD_KIND_LABEL, "operator": "In", "values": list(team.kinds.serving)}]},
        "policyTypes": ["Ingress"],
        "ingress": [{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.ingress_namespace}}}],
            "ports": _http_port(),
        }],
    })


def make_network_policies(*, team: TeamSpec) -> list[dict[str, Any]]:
    return [
        make_network_policy(team=team),
        make_egress_network_policy(team=team),
        make_portal_network_policy(team=team),
        make_ingress_controller_network_policy(team=team),
    ]


def make_role_binding(*, team: TeamSpec) -> dict[str, Any]:
    """Members read their pods and logs with their own credentials (`member_role`: the chart's
    read-only member role, or the built-in `view`).

    Each is bound as the API server names an OIDC user, `<user_prefix><claim value>`, so the
    name is the provider's subject, which no one can choose, rather than a portal username."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": team_meta("gpu-portal-members", team),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": team.member_role},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"{team.user_prefix}{subject}"}
            for subject in sorted(team.subjects)
        ],
    }


def make_portal_role_binding(*, team: TeamSpec, reader: PortalReader) -> dict[str, Any]:
    """The portal's own reads in the team's namespace, where the ClusterRole it holds across the
    cluster no longer grants them. Made right after the namespace, before anything that needs it."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": team_meta("gpu-portal-service-account", team),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader.cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": reader.service_account, "namespace": reader.namespace}],
    }


def gate_grant_name(team_namespace: str) -> str:
    return f"gpu-portal-gate-{team_namespace}"


def make_gate_grant(*, team: TeamSpec, service: tuple[str, str]) -> dict[str, Any]:
    """Lets the team's HTTPRoutes name the portal's Service in their ExternalAuth filter: Gateway
    API refuses a reference into another namespace unless a ReferenceGrant there allows it. It
    lives in the portal's namespace, one per team, naming that Service only."""
    namespace, name = service
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
        "metadata": _meta(gate_grant_name(team.namespace), team.labels, namespace, team.annotations),
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": team.namespace}],
                 "to": [{"group": "", "kind": "Service", "name": name}]},
    }


def make_team_objects(*, team: TeamSpec, queue: QueueBackend) -> list[dict[str, Any]]:
    """Everything a team has in the cluster, in the order to create it: the queue backend's team
    queue last, once the namespace it admits into is ready."""
    reader = team.portal_reader
    return [
        make_namespace(team=team),
        *([make_portal_role_binding(team=team, reader=reader)] if reader is not None else []),
        make_resource_quota(team=team),
        make_limit_range(team=team),
        *make_network_policies(team=team),
        make_role_binding(team=team),
        *([make_gate_grant(team=team, service=team.gate_service)] if team.gate_service is not None else []),
        *queue.team_objects(team=team),
    ]
