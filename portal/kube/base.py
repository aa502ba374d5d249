"""The gateway interface, the kinds the portal uses, and errors that say which object and why."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

FIELD_MANAGER = "gpu-portal"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-portal"}


@dataclass(frozen=True)
class KindInfo:
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def collection_path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace)}/{name}"


# Every kind the portal reads or writes. A static table, so no discovery calls are spent.
KINDS: dict[tuple[str, str], KindInfo] = {
    (info.api_version, info.kind): info
    for info in [
        KindInfo("v1", "Namespace", "namespaces", False),
        KindInfo("v1", "ResourceQuota", "resourcequotas", True),
        KindInfo("v1", "LimitRange", "limitranges", True),
        KindInfo("v1", "ConfigMap", "configmaps", True),
        KindInfo("v1", "Pod", "pods", True),
        KindInfo("v1", "Service", "services", True),
        KindInfo("v1", "Secret", "secrets", True),
        KindInfo("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
        KindInfo("v1", "Event", "events", True),
        KindInfo("v1", "Node", "nodes", False),
        KindInfo("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
        KindInfo("networking.k8s.io/v1", "Ingress", "ingresses", True),
        # Gateway API, where a site routes workload endpoints through a Gateway: a workload's
        # HTTPRoute, and per team the grant that lets its routes ask the portal's Service.
        KindInfo("gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes", True),
        KindInfo("gateway.networking.k8s.io/v1", "ReferenceGrant", "referencegrants", True),
        KindInfo("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
        KindInfo("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
        # Read only: a flavor's pods name one, which the site's node pools install (never the portal).
        KindInfo("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False),
        KindInfo("batch/v1", "Job", "jobs", True),
        KindInfo("apps/v1", "Deployment", "deployments", True),
        KindInfo("apps/v1", "StatefulSet", "statefulsets", True),
        KindInfo("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "resourceflavors", False),
        KindInfo("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses", False),
        KindInfo("kueue.x-k8s.io/v1beta2", "Cohort", "cohorts", False),  # a department's
        KindInfo("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", False),
        KindInfo("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues", True),
        KindInfo("kueue.x-k8s.io/v1beta2", "Workload", "workloads", True),
        # Kueue's on-demand visibility API, served by Kueue's visibility server through an
        # APIService: only its subresources are read (read_subresource).
        KindInfo("visibility.kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", False),
        # Volcano, where a site runs it as its queue backend: a team's Queues, a workload's PodGroup, and
        # the Volcano Job a training runs as.
        KindInfo("scheduling.volcano.sh/v1beta1", "Queue", "queues", False),
        KindInfo("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups", True),
        KindInfo("batch.volcano.sh/v1alpha1", "Job", "jobs", True),
        KindInfo("coordination.k8s.io/v1", "Lease", "leases", True),
        # Dynamic Resource Allocation: a workload's claim template (a flavor claimed through a
        # DeviceClass) and the claims made from it (read: which device a pod got). ResourceSlices
        # and DeviceClasses are the DRA driver's: the portal only reads them.
        KindInfo("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates", True),
        KindInfo("resource.k8s.io/v1", "ResourceClaim", "resourceclaims", True),
        KindInfo("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False),
        KindInfo("resource.k8s.io/v1", "DeviceClass", "deviceclasses", False),
    ]
}


def kind_info(api_version: str, kind: str) -> KindInfo:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise KubeError(f"the portal does not know the kind {kind} ({api_version})") from None


@dataclass(frozen=True, order=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @property
    def info(self) -> KindInfo:
        return kind_info(self.api_version, self.kind)


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    meta = obj.get("metadata") or {}
    info = kind_info(obj["apiVersion"], obj["kind"])
    return ObjectRef(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace") if info.namespaced else None)


class KubeError(Exception):
    """A cluster call failed. The message names the object and says why in words."""

    def __init__(self, message: str, *, ref: ObjectRef | None = None, status: int | None = None, reason: str = "") -> None:
        super().__init__(f"{ref}: {message}" if ref else message)
        self.ref, self.status, self.reason = ref, status, reason

    @property
    def retriable(self) -> bool:
        return self.status is None or self.status == 429 or self.status >= 500

    @property
    def refused(self) -> bool:
        """The API server said no to the object itself (forbidden, a quota, a conflict, invalid),
        not that it was away: asking again would be refused again."""
        return self.status in (403, 409, 422)


# What `list_kinds` answers: each (apiVersion, kind) asked, with its objects.
KindLists = dict[tuple[str, str], list[dict[str, Any]]]


@dataclass(frozen=True)
class WatchEvent:
    # ADDED, MODIFIED, DELETED, or RELISTED: the watch (re)started from a fresh list, which the
    # event carries as {"items": [...]}: the whole current state, replacing what came before.
    type: str
    object: dict[str, Any]


@dataclass(frozen=True)
class NodeSpec:
    """A GPU node the portal expects a cluster to have: its name, labels and allocatable units."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int | str]  # resource name -> units, e.g. {"nvidia.com/gpu": 8}
    taints: Sequence[Mapping[str, str]] = ()
    capacity: Mapping[str, int | str] | None = None  # where it differs from allocatable (devices unhealthy)
    # DRA devices its driver publishes in a ResourceSlice: driver -> how many (a flavor claimed through a DeviceClass)
    devices: Mapping[str, int] = field(default_factory=dict)


class Gateway(Protocol):
    """What the portal may do with a cluster."""

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        """Server-side apply. Idempotent: the same object twice changes nothing the second time."""

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply with dryRun=All: the API server validates and admits the object (its
        admission webhooks included) and stores nothing. Answers what would be stored; a refusal
        is a KubeError saying why, in the API server's words."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Creates the object (a POST); one that exists already is a KubeError with status 409
        (reason AlreadyExists). For objects raced for, such as a leader election's Lease."""

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replaces the object (a PUT) only if it is still at obj's metadata.resourceVersion: one
        changed meanwhile is a KubeError with status 409 (reason Conflict). Without a
        resourceVersion the PUT is unconditional, and for a Lease creates a missing one."""

    def delete(self, ref: ObjectRef) -> None:
        """Deletes the object; one that is already gone counts as deleted."""

    def get(self, ref: ObjectRef) -> dict[str, Any] | None: ...

    def cluster_now(self) -> dt.datetime:
        """The cluster's time now: what "gone by now" means for a pod its nodes' clocks started (the
        simulated cluster's clock runs ahead of the wall clock when a test or the demo advances it)."""

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """The matching objects and the resourceVersion to watch from. `fields` is a field
        selector (dotted path: value, all must match), which the API server supports only for
        some fields of some kinds: metadata.name and metadata.namespace everywhere, and for
        Events involvedObject.*, reason, type and source."""

    def list_kinds(
        self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
    ) -> KindLists:
        """Every object of each (apiVersion, kind) matching `labels`, across all namespaces, each
        kind as `list` answers it. A real cluster is asked for all the kinds at once. When any
        kind fails, the first failure in `kinds`' order is raised, once every list has ended."""

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[WatchEvent]:
        """Changes after resource_version. Without a version, or when the server has forgotten it
        (410), it yields RELISTED with every current object, then goes on watching."""

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        """A pod's log: its last `tail_lines` lines, or all of it (None), at most `limit_bytes`
        (the API server's own cap, so a huge log is never pulled whole into the portal)."""

    def read_subresource(
        self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """A GET of one object's subresource in an aggregated API (a queue backend's reads, such
        as Kueue's pending workloads of a ClusterQueue): the body, or None when the cluster does
        not serve it now (404: no APIService for the group, or no such object; 503: one is
        registered but its server does not answer)."""

    def expect_nodes(self, nodes: Sequence[NodeSpec]) -> None:
        """These are the GPU nodes the catalog describes. A cluster that makes its nodes from the
        catalog (the simulated one) makes exactly these; a real cluster has its own and ignores it."""

    def tick(self) -> None:
        """Lets a cluster that only moves when told (the simulated one) catch up with the clock:
        its controllers admit, place and finish. A real cluster moves by itself and ignores it."""


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIXES: dict[str | None, int | Fraction] = {
    None: 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def quantity(value: Any) -> Fraction | None:
    """A Kubernetes quantity as an exact number ("10k" == "10000"), or None if it is not one."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        return Fraction(match.group(1)) * _SUFFIXES[match.group(2)]
    except (ValueError, ZeroDivisionError):
        return None


def label_selector(labels: dict[str, str] | None) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted((labels or {}).items()))


def taint_tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a pod with these tolerations may run despite the taint: the scheduler's rule (an
    empty effect matches every effect, `Exists` with no key every taint, `Equal` the key and value)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False
