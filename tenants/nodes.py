"""The nodes behind the catalog: whether the nodes a flavor selects offer what the flavor says.

An admin types a flavor (its resource, how a GPU is shared, one unit's fraction of a GPU, the
node labels and tolerations); the nodes say what is really there: the resource they advertise,
and, where NVIDIA's GPU Feature Discovery runs, how the device plugin shares each GPU
(`nvidia.com/gpu.sharing-strategy`, `nvidia.com/gpu.replicas`, `nvidia.com/gpu.count`). Where the
two disagree in a way that makes a launch run or bill as something it is not, the flavor has a
*problem* and launches on it are refused until a check finds it fixed:
- a flavor sold as whole GPUs (or MIG slices) on nodes that share each GPU between pods;
- a time-sliced flavor on MPS nodes or the other way round, or on nodes that do not share;
- a shared flavor whose unit is not one replica of the nodes' GPUs (billed at 1/4 of a GPU on
  nodes that split each GPU two ways);
- nodes that all carry a taint the flavor does not tolerate (its pods would wait for ever).
What only informs is a *warning*: no node carries the labels (a pool scaled to zero), nodes that
advertise none of the resource (the device plugin is not running), devices unhealthy
(allocatable below capacity), nodes not ready or cordoned, fewer units than the catalog's capacity.

One list of the cluster's Nodes per check (and one of each GPU stack pod looked for: the device
plugin's, the exporter's), whatever the number of flavors or teams. The verdicts are written on the
flavors, which the launch reads with the flavor itself; the GPU nodes are kept (GpuNode) for the
nodes page and API, which then cost the API server nothing. The check runs after each platform
reconcile (a flavor saved), every minute on beat, and when a platform admin asks on the page.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.health import NODE_CHECK, heartbeat_at, heartbeat_record
from portal.hooks import Hook
from portal.kube import gateway, taint_tolerated
from portal.kube.base import quantity
from portal.kube.dra import RESOURCE_API, class_driver, devices_by_node
from tenants import selectors
from tenants.models import Flavor, GpuNode

log = logging.getLogger(__name__)

SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # GPU Feature Discovery: none, time-slicing or mps
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # which entry of the plugin's config a node uses
STRATEGY_OF_MODE: dict[str, str] = {Flavor.SharingMode.TIME_SLICED: "time-slicing", Flavor.SharingMode.MPS: "mps"}
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/", "gpu.intel.com/", "aliyun.com/gpu")
GPU_LABEL_PREFIXES = ("nvidia.com/", "amd.com/", "gpu.intel.com/", "feature.node.kubernetes.io/pci-10de")
MODE_WORDS: dict[str, str] = {
    Flavor.SharingMode.EXCLUSIVE: "sold as whole GPUs", Flavor.SharingMode.MIG: "sold as MIG slices",
    Flavor.SharingMode.TIME_SLICED: "time-sliced", Flavor.SharingMode.MPS: "shared by MPS",
    Flavor.SharingMode.GPU_MEMORY: "memory-sliced", Flavor.SharingMode.VGPU: "sold as vGPU slices",
}


@dataclass(frozen=True)
class NodeVerdict:
    """What the check found for one flavor: `problem` refuses launches, `warnings` inform."""

    problem: str = ""
    warnings: tuple[str, ...] = ()
    nodes: int = 0  # nodes carrying the flavor's labels
    offered: int = 0  # units they advertise as allocatable (ready and schedulable nodes only)


@dataclass(frozen=True)
class _Node:
    name: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, Any]]
    allocatable: Mapping[str, str]
    capacity: Mapping[str, str]
    ready: bool
    cordoned: bool

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> _Node:
        spec, status = body.get("spec") or {}, body.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        return cls(name=body["metadata"]["name"], labels=body["metadata"].get("labels") or {},
                   taints=spec.get("taints") or [], allocatable=status.get("allocatable") or {},
                   capacity=status.get("capacity") or {}, ready=conditions.get("Ready") == "True",
                   cordoned=bool(spec.get("unschedulable")))


@dataclass
class _Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _count(value: Any) -> int:
    """A resource's amount as a whole number, rounded down ("7800m" CPU is 7 cores); 0 when unreadable."""
    parsed = quantity(value)
    return math.floor(parsed) if parsed is not None and parsed > 0 else 0


def taint_words(taint: Mapping[str, Any]) -> str:
    """A taint as kubectl writes one: key[=value]:effect."""
    return f"{taint.get('key')}{'=' + str(taint['value']) if taint.get('value') else ''}:{taint.get('effect')}"


def _untolerated(node: _Node, flavor: Flavor) -> list[str]:
    # The node lifecycle's own taints (not-ready, unschedulable) are the node's state, said apart.
    return [taint_words(taint) for taint in node.taints
            if taint.get("effect") in BLOCKING_EFFECTS and not str(taint.get("key", "")).startswith("node.kubernetes.io/")
            and not taint_tolerated(taint, flavor.tolerations)]


def _sharing(node: _Node, flavor: Flavor, findings: _Findings) -> None:
    """The node's GPU sharing, as GPU Feature Discovery labels it, against the flavor's."""
    strategy = node.labels.get(SHARING_STRATEGY_LABEL)
    replicas = _count(node.labels.get(REPLICAS_LABEL, "1")) or 1
    wanted = STRATEGY_OF_MODE.get(flavor.sharing_mode)
    if strategy is None:
        if wanted:
            findings.warnings.append(
                f"Node {node.name} does not say how it shares its GPUs (no {SHARING_STRATEGY_LABEL} label from GPU Feature "
                f"Discovery), so the portal cannot check that one unit is {flavor.fraction} of a GPU.")
        return
    shares = strategy in STRATEGY_OF_MODE.values() and replicas > 1
    if wanted is None:
        if shares:
            findings.problems.append(
                f"Node {node.name} shares each GPU {replicas} ways ({strategy}), but {flavor.name} is "
                f"{MODE_WORDS[flavor.sharing_mode]}: a pod would get 1/{replicas} of a GPU billed as {flavor.fraction} of one.")
        return
    if strategy != wanted:
        findings.problems.append(
            f"Node {node.name} shares its GPUs by {strategy}, but {flavor.name} is {MODE_WORDS[flavor.sharing_mode]}.")
        return
    if not any(taint.get("effect") in BLOCKING_EFFECTS and not str(taint.get("key", "")).startswith("node.kubernetes.io/")
               for taint in node.taints):
        findings.warnings.append(
            f"Node {node.name} shares its GPUs ({strategy}) but carries no taint: a pod asking for a whole GPU may land "
            "there if its flavor's labels match the node. Taint the pool nvidia.com/gpu.shared:NoSchedule (the shared "
            "presets tolerate it).")
    if Fraction(1, replicas) != flavor.fraction:
        findings.problems.append(
            f"Node {node.name} splits each GPU {replicas} ways, so one unit of {flavor.resource_name} is 1/{replicas} of a "
            f"GPU, but {flavor.name} prices a unit as {flavor.fraction} of one.")
    gpus = _count(node.labels.get(GPU_COUNT_LABEL, ""))
    advertised = _count(node.capacity.get(flavor.resource_name, node.allocatable.get(flavor.resource_name, 0)))
    if gpus and advertised and advertised != gpus * replicas:
        findings.warnings.append(
            f"Node {node.name} has {gpus} GPUs × {replicas} replicas = {gpus * replicas} units but advertises "
            f"{advertised} {flavor.resource_name}: is its device plugin's config the one its label names?")


CAPACITY, ALLOCATABLE = 0, 1  # the places in a GpuNode's [capacity, allocatable]


def units_in(flavor: Flavor, gpus: Mapping[str, Sequence[int]], which: int) -> int:
    """The flavor's units a node's GPU resources make ([capacity, allocatable] per resource): as
    many as its scarcest resource gives, so a cGPU node with memory and no compute to spare
    offers none."""
    return min(gpus.get(r.name, [0, 0])[which] // r.amount for r in flavor.unit_resources)


@dataclass(frozen=True)
class Devices:
    """What the cluster's DRA objects say: each DeviceClass's driver (None: its selectors say more
    than a driver, so its devices cannot be told apart here) and each node's published devices."""

    drivers: Mapping[str, str | None] = field(default_factory=dict)
    by_node: Mapping[str, Sequence[tuple[str, str, str]]] = field(default_factory=dict)

    def published(self, node: str, device_class: str) -> int:
        """The devices of the class's driver a node publishes (none where the class is unknown or unread)."""
        driver = self.drivers.get(device_class)
        if driver is None:
            return 0
        return sum(1 for device in self.by_node.get(node, ()) if device[0] == driver)

    @classmethod
    def read(cls) -> Devices:
        """Two lists: the DeviceClasses and the ResourceSlices."""
        classes = gateway().list(RESOURCE_API, "DeviceClass")[0]
        return cls(drivers={body["metadata"]["name"]: class_driver(body) for body in classes},
                   by_node=devices_by_node(gateway().list(RESOURCE_API, "ResourceSlice")[0]))


def judge(flavor: Flavor, bodies: Iterable[Mapping[str, Any]], devices: Devices | None = None) -> NodeVerdict:
    """The verdict on one flavor from the cluster's Node objects (and, for a flavor claimed through
    a DeviceClass, its DRA objects)."""
    return _judge(flavor, [_Node.of(body) for body in bodies], devices or Devices())


def _claimed_devices(flavor: Flavor, nodes: list[_Node], devices: Devices) -> NodeVerdict:
    """The verdict on a flavor claimed through a DeviceClass: its class must exist, and the nodes
    carrying its labels publish its devices (a unit is one)."""
    name = flavor.device_class_name
    if name not in devices.drivers:
        return NodeVerdict(problem=f"The DeviceClass {name} is not in the cluster, so no pod claiming it can start: install "
                                   "its DRA driver, or correct the flavor's device class.", nodes=len(nodes))
    driver = devices.drivers[name]
    if driver is None:
        unread = f"The DeviceClass {name} selects its devices by more than their driver, so the portal cannot count them."
        return NodeVerdict(warnings=(unread,), nodes=len(nodes))
    findings, offered = _Findings(), 0
    for node in nodes:
        count = devices.published(node.name, name)
        if not count:
            findings.warnings.append(f"Node {node.name} publishes no {driver} devices: is its DRA driver running there?")
        elif untolerated := _untolerated(node, flavor):
            findings.warnings.append(f"Pods of {flavor.name} cannot run on {node.name} ({', '.join(untolerated)}).")
        elif node.ready and not node.cordoned:
            offered += count
    if offered < flavor.capacity_units:
        findings.warnings.append(f"The catalog says {flavor.capacity_units} units; the nodes publish {offered} {driver} "
                                 "devices now.")
    return NodeVerdict(warnings=tuple(findings.warnings), nodes=len(nodes), offered=offered)


GIB = 1024**3


def _cpu_pool(flavor: Flavor, nodes: list[_Node]) -> NodeVerdict:
    """The verdict on a CPU-only flavor: its units are each node's allocatable cores and memory,
    as many as the scarcer of the two gives (what kubelet keeps for the system is not allocatable,
    so no node offers all it has)."""
    findings, offered, blocked = _Findings(), 0, []
    for node in nodes:
        if untolerated := _untolerated(node, flavor):
            blocked.append(f"{node.name} ({', '.join(untolerated)})")
            continue
        if not node.ready:
            findings.warnings.append(f"Node {node.name} is not ready.")
        elif node.cordoned:
            findings.warnings.append(f"Node {node.name} is cordoned: nothing new starts on it.")
        else:
            cores, memory = quantity(node.allocatable.get("cpu", 0)) or 0, quantity(node.allocatable.get("memory", 0)) or 0
            offered += min(math.floor(cores / flavor.resource_per_unit),
                           math.floor(memory / (flavor.memory_gib_per_unit * GIB)))
    _taint_findings(flavor, blocked, of=len(nodes), findings=findings)
    if offered < flavor.capacity_units:
        findings.warnings.append(f"The catalog says {flavor.capacity_units} units of {flavor.resources_display}; the "
                                 f"nodes' allocatable CPU and memory make {offered} now.")
    return NodeVerdict(problem=" ".join(findings.problems), warnings=tuple(findings.warnings), nodes=len(nodes),
                       offered=offered)


def _taint_findings(flavor: Flavor, blocked: list[str], *, of: int, findings: _Findings) -> None:
    """Nodes whose taints the flavor's pods do not tolerate: a problem when they are all `of` its
    nodes, a warning when some."""
    if blocked and len(blocked) == of:
        findings.problems.append(f"Every node of {flavor.name} has a taint its pods do not tolerate: {'; '.join(blocked)}. "
                                 "Add the toleration to the flavor, or take the taint off the nodes.")
    elif blocked:
        findings.warnings.append(f"Pods of {flavor.name} cannot run on {'; '.join(blocked)}: a taint they do not tolerate.")


def _judge(flavor: Flavor, nodes: list[_Node], devices: Devices) -> NodeVerdict:
    wanted = {str(key): str(value) for key, value in (flavor.node_labels or {}).items()}
    selected = [node for node in nodes if selects(flavor, node.labels, node.capacity)]
    findings = _Findings()
    if not selected:
        labels = ", ".join(f"{key}={value}" for key, value in sorted(wanted.items())) or flavor.resource_name
        findings.warnings.append(f"No node has {labels}: nothing runs on {flavor.name} until one does.")
        return NodeVerdict(warnings=tuple(findings.warnings))
    if flavor.device_class_name:
        return _claimed_devices(flavor, selected, devices)
    if flavor.is_cpu:
        return _cpu_pool(flavor, selected)
    offering = [node for node in selected if _count(node.capacity.get(flavor.resource_name, 0))]
    if not offering:
        findings.warnings.append(
            f"{len(selected)} node(s) carry {flavor.name}'s labels but none advertises {flavor.resource_name}: is the "
            "device plugin running on them?")
    offered, blocked, lacking = 0, [], []
    for node in offering:
        _sharing(node, flavor, findings)
        allocatable, capacity = (_count(node.allocatable.get(flavor.resource_name, 0)),
                                 _count(node.capacity.get(flavor.resource_name, 0)))
        if allocatable < capacity:
            findings.warnings.append(f"Node {node.name}: {capacity - allocatable} of {capacity} {flavor.resource_name} "
                                     "are unhealthy (allocatable below capacity).")
        if missing := [r.name for r in flavor.unit_resources[1:] if not _count(node.capacity.get(r.name, 0))]:
            lacking.append(f"{node.name} (no {', '.join(missing)})")
            continue
        if not node.ready:
            findings.warnings.append(f"Node {node.name} is not ready.")
        if node.cordoned:
            findings.warnings.append(f"Node {node.name} is cordoned: nothing new starts on it.")
        if untolerated := _untolerated(node, flavor):
            blocked.append(f"{node.name} ({', '.join(untolerated)})")
        elif node.ready and not node.cordoned:
            offered += units_in(flavor, {name: [0, _count(node.allocatable.get(name, 0))]
                                         for name in (r.name for r in flavor.unit_resources)}, ALLOCATABLE)
    if offering and len(lacking) == len(offering):
        findings.problems.append(f"A unit of {flavor.name} asks for {flavor.resources_display}, and no node of it "
                                 f"advertises all of them: {'; '.join(lacking)}. Its pods cannot start anywhere.")
    elif lacking:
        findings.warnings.append(f"Pods of {flavor.name} cannot run on {'; '.join(lacking)}: a resource its unit asks for.")
    if offering:
        _taint_findings(flavor, blocked, of=len(offering), findings=findings)
    if offering and offered < flavor.capacity_units:
        findings.warnings.append(f"The catalog says {flavor.capacity_units} units; the nodes offer {offered} now.")
    return NodeVerdict(problem=" ".join(dict.fromkeys(findings.problems)), warnings=tuple(dict.fromkeys(findings.warnings)),
                       nodes=len(selected), offered=offered)


def check_flavors(*, flavors: Iterable[Flavor] | None = None) -> dict[int, NodeVerdict]:
    """Judges the flavors (every active one by default) on one list of the cluster's Nodes,
    writes each verdict on its flavor and keeps the GPU nodes for the nodes page. A cluster that
    does not answer is a KubeError, and everything stays as the last check left it."""
    active = list(Flavor.objects.filter(is_active=True))
    chosen = active if flavors is None else list(flavors)
    nodes = [_Node.of(body) for body in gateway().list("v1", "Node")[0]]
    devices = Devices.read() if any(flavor.device_class_name for flavor in active) else Devices()
    now = timezone.now()
    _keep_gpu_nodes(nodes, active, now, gpu_stack(), devices)
    heartbeat_record(name=NODE_CHECK, at=now)
    verdicts = {}
    for flavor in chosen:
        verdict = verdicts[flavor.pk] = _judge(flavor, nodes, devices)
        warnings = "\n".join(verdict.warnings)
        if (flavor.nodes_problem, flavor.nodes_warnings) != (verdict.problem, warnings):
            log.info("flavor %s: nodes %s", flavor.slug, verdict.problem or "agree")
        Flavor.objects.filter(pk=flavor.pk).update(nodes_problem=verdict.problem, nodes_warnings=warnings,
                                                   nodes_checked_at=now, nodes_offered=verdict.offered)
        flavor.nodes_problem, flavor.nodes_warnings, flavor.nodes_checked_at = verdict.problem, warnings, now
        flavor.nodes_offered = verdict.offered
    return verdicts


def selects(flavor: Flavor, labels: Mapping[str, str], resources: Collection[str]) -> bool:
    """Whether the flavor's pods may land on a node with these labels advertising these resources:
    it carries every label the flavor names, or, for a flavor that names none, its resource."""
    wanted = {str(key): str(value) for key, value in (flavor.node_labels or {}).items()}
    if not wanted:
        return flavor.resource_name in resources
    return all(labels.get(key) == value for key, value in wanted.items())


# The GPU stack's pods the nodes page looks for on each node, by what it calls them.
STACK_SETTINGS = {"device plugin": "PORTAL_DEVICE_PLUGIN_POD_LABELS", "exporter": "PORTAL_GPU_EXPORTER_POD_LABELS"}


def _pod_state(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        if not container.get("ready"):
            waiting = (container.get("state") or {}).get("waiting") or {}
            return f"not ready ({waiting.get('reason') or status.get('phase') or 'starting'})"
    return "running" if status.get("phase") == "Running" else f"not ready ({status.get('phase') or 'Pending'})"


def gpu_stack() -> dict[str, dict[str, str]]:
    """Per node, the state of each GPU stack pod looked for (the device plugin, the exporter) on it;
    one list per kind of pod, across namespaces. Not looked for with namespaced reads (the portal
    may not list pods outside team namespaces) nor for a kind whose labels are set empty. The
    entry of node "" holds what every node has when it has none of its own."""
    if settings.PORTAL_NAMESPACED_READS:
        return {}
    found: dict[str, dict[str, str]] = {}
    for role, setting in STACK_SETTINGS.items():
        wanted = dict(getattr(settings, setting))
        if not wanted:
            continue
        found.setdefault("", {})[role] = "none"  # looked for: a node with none says so
        for pod in gateway().list("v1", "Pod", labels=wanted)[0]:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                found.setdefault(node, {})[role] = _pod_state(pod)
    return found


def _keep_gpu_nodes(nodes: Iterable[_Node], flavors: list[Flavor], now: dt.datetime,
                    stack: Mapping[str, Mapping[str, str]], devices: Devices) -> None:
    """Keeps the nodes that advertise GPUs or that a flavor selects (GpuNode), writing only the
    rows that changed: a quiet minute on 500 nodes writes nothing. A DeviceClass flavor's devices a
    node publishes are kept under the flavor's resource, as a device plugin's would be."""
    resources = {resource.name for flavor in flavors for resource in flavor.unit_resources}
    selecting = {str(key) for flavor in flavors for key in (flavor.node_labels or {})}
    claimed = [flavor for flavor in flavors if flavor.device_class_name]
    wanted: dict[str, GpuNode] = {}
    for node in nodes:
        gpus = {name: [_count(node.capacity.get(name, 0)), _count(node.allocatable.get(name, 0))]
                for name in sorted(set(node.capacity) | set(node.allocatable))
                if name in resources or name.startswith(GPU_RESOURCE_PREFIXES)}
        for flavor in claimed:
            if published := devices.published(node.name, flavor.device_class_name):
                gpus[flavor.resource_name] = [published, published]
        if not gpus and not any(selects(flavor, node.labels, node.capacity) for flavor in flavors):
            continue
        labels = {key: value for key, value in sorted(node.labels.items())
                  if key in selecting or key.startswith(GPU_LABEL_PREFIXES)}
        pods = {**stack.get("", {}), **stack.get(node.name, {})}
        wanted[node.name] = GpuNode(name=node.name, labels=labels, gpus=gpus, taints=[dict(t) for t in node.taints],
                                    ready=node.ready, cordoned=node.cordoned, stack=pods, changed_at=now)
    fields = ("labels", "gpus", "taints", "ready", "cordoned", "stack")
    with transaction.atomic():
        known = {row.name: row for row in GpuNode.objects.select_for_update()}
        GpuNode.objects.filter(name__in=set(known) - set(wanted)).delete()
        changed = []
        for name, row in wanted.items():
            old = known.get(name)
            if old is not None and all(getattr(old, field) == getattr(row, field) for field in fields):
                continue
            if old is not None:
                row.pk = old.pk
            changed.append(row)
        GpuNode.objects.bulk_create([row for row in changed if row.pk is None])
        GpuNode.objects.bulk_update([row for row in changed if row.pk is not None], [*fields, "changed_at"])


def device_plugin_config(flavor: Flavor) -> tuple[str, str] | None:
    """For a time-sliced or MPS flavor, the NVIDIA device plugin's sharing config that makes its
    nodes offer what it declares: the name of the config (the key in the plugin's ConfigMap, and
    the value of the `nvidia.com/device-plugin.config` label that selects it on a node) and the
    YAML. None for a flavor whose sharing the plugin's config does not set, or whose unit is not
    one replica of a GPU."""
    strategy = STRATEGY_OF_MODE.get(flavor.sharing_mode)
    if strategy is None or flavor.fraction.numerator != 1:
        return None
    replicas = flavor.fraction.denominator
    section = "timeSlicing" if strategy == "time-slicing" else "mps"
    # The plugin names a shared resource `<name>.shared` when renameByDefault is on; the flavor's
    # resource says which of the two the site chose.
    base, renamed = flavor.resource_name.removesuffix(".shared"), flavor.resource_name.endswith(".shared")
    name = str((flavor.node_labels or {}).get(DEVICE_PLUGIN_CONFIG_LABEL) or f"{flavor.slug}-{replicas}")
    text = ("version: v1\n"
            "sharing:\n"
            f"  {section}:\n"
            + ("    renameByDefault: true\n" if renamed else "")
            + "    resources:\n"
            f"      - name: {base}\n"
            f"        replicas: {replicas}\n")
    return name, text


# --- The nodes page ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeWorkload:
    """A workload with a pod running on a node (an open run interval there), and its GPU units."""

    pk: int
    name: str
    team: str
    units: int


# The portal's workloads running on each node (of these names; None: every node), by node name:
# jobs answers from its run intervals.
WorkloadsOnNodes = Callable[[Collection[str] | None], dict[str, list[NodeWorkload]]]
WORKLOADS_ON_NODES = Hook[WorkloadsOnNodes]("tenants.nodes.WORKLOADS_ON_NODES", by="jobs")


@dataclass(frozen=True)
class NodeXid:
    """An XID error a GPU of the node reported while a workload's pod held it, as the portal recorded it."""

    at: dt.datetime
    code: int
    gpu: str
    meaning: str
    hardware: bool  # the GPU, not the program, failed
    workload: NodeWorkload | None  # None: the workload record is gone


# A node's XID history, newest first: jobs answers from the XID events its sweep records.
XidsOnNode = Callable[[str], list[NodeXid]]
XIDS_ON_NODE = Hook[XidsOnNode]("tenants.nodes.XIDS_ON_NODE", by="jobs")


@dataclass(frozen=True)
class NodeRow:
    node: GpuNode
    flavors: tuple[Flavor, ...]  # the active flavors that select it
    workloads: tuple[NodeWorkload, ...]

    @property
    def flavor_names(self) -> list[str]:
        return [flavor.name for flavor in self.flavors]

    @property
    def sharing(self) -> str:
        """How the device plugin shares its GPUs, as GPU Feature Discovery labels it."""
        strategy = self.node.labels.get(SHARING_STRATEGY_LABEL, "")
        replicas = self.node.labels.get(REPLICAS_LABEL, "")
        if strategy in STRATEGY_OF_MODE.values() and replicas not in ("", "1"):
            return f"{strategy}, {replicas} replicas per GPU"
        return strategy

    @property
    def taint_words(self) -> list[str]:
        return [taint_words(taint) for taint in self.node.taints]

    @property
    def stack_trouble(self) -> list[str]:
        """The GPU stack pods looked for that are missing or not ready on it, in words."""
        return [f"{role} {state}" if state != "none" else f"no {role}" for role, state in sorted(self.node.stack.items())
                if state != "running"]

    @property
    def needs_attention(self) -> bool:
        """Not ready, cordoned, with devices it cannot hand out, or its GPU stack in trouble."""
        return not self.node.ready or self.node.cordoned or self.node.unhealthy > 0 or bool(self.stack_trouble)


@dataclass(frozen=True)
class Pool:
    """A flavor's nodes beside what the catalog and the guarantees say of it."""

    flavor: Flavor
    guaranteed: int
    nodes: list[NodeRow]

    @property
    def capacity(self) -> int:
        return sum(units_in(self.flavor, row.node.gpus, CAPACITY) for row in self.nodes)

    @property
    def offered(self) -> int:
        """Units the ready, schedulable nodes can hand out now."""
        return sum(units_in(self.flavor, row.node.gpus, ALLOCATABLE) for row in self.nodes
                   if row.node.ready and not row.node.cordoned)

    @property
    def short(self) -> bool:
        """The catalog says more than the nodes offer: guarantees may rest on capacity not there."""
        return self.offered < self.flavor.capacity_units

    @property
    def stack_looked_for(self) -> bool:
        return any(row.node.stack for row in self.nodes)

    @property
    def stack_down(self) -> int:
        """Nodes where a GPU stack pod looked for is missing or not ready."""
        return sum(1 for row in self.nodes if row.stack_trouble)

    @property
    def not_ready(self) -> int:
        return sum(1 for row in self.nodes if not row.node.ready)

    @property
    def cordoned(self) -> int:
        return sum(1 for row in self.nodes if row.node.ready and row.node.cordoned)

    @property
    def unhealthy(self) -> int:
        """Units of the flavor its nodes have but cannot hand out."""
        return sum(max(units_in(self.flavor, row.node.gpus, CAPACITY) - units_in(self.flavor, row.node.gpus, ALLOCATABLE), 0)
                   for row in self.nodes)


@dataclass(frozen=True)
class NodesPicture:
    pools: list[Pool]
    rows: list[NodeRow]  # every node kept, by name
    checked_at: dt.datetime | None

    @property
    def unmatched(self) -> list[NodeRow]:
        """GPU nodes no active flavor selects: nothing the portal launches runs there."""
        return [row for row in self.rows if not row.flavors]

    def listed(self, *, flavor: str = "", attention: bool = False) -> list[NodeRow]:
        """The nodes of one flavor (by slug; "-": of none; empty: every node), or only those that
        need attention."""
        return [row for row in self.rows
                if (not flavor or (not row.flavors if flavor == "-" else flavor in (f.slug for f in row.flavors)))
                and (not attention or row.needs_attention)]


def nodes_picture() -> NodesPicture:
    """Per active flavor, its nodes as the last check kept them, with the workloads on each; then
    the GPU nodes no flavor selects. Database reads only (four, however many nodes)."""
    flavors = list(Flavor.objects.filter(is_active=True).order_by("name"))
    guaranteed = selectors.flavor_guaranteed_totals()
    rows = _rows(GpuNode.objects.all(), flavors, WORKLOADS_ON_NODES.call(None))
    pools = [Pool(flavor=flavor, guaranteed=guaranteed.get(flavor.pk, 0),
                  nodes=[row for row in rows if flavor in row.flavors]) for flavor in flavors]
    return NodesPicture(pools=pools, rows=rows, checked_at=heartbeat_at(NODE_CHECK))


def node_row(name: str) -> NodeRow | None:
    """One node as the last check kept it, with its flavors and the workloads on it (None: the
    check never kept a node of that name)."""
    node = GpuNode.objects.filter(name=name).first()
    if node is None:
        return None
    return _rows([node], list(Flavor.objects.filter(is_active=True).order_by("name")), WORKLOADS_ON_NODES.call([name]))[0]


def _rows(kept: Iterable[GpuNode], flavors: list[Flavor], on_nodes: Mapping[str, list[NodeWorkload]]) -> list[NodeRow]:
    return [NodeRow(node=node, flavors=tuple(flavor for flavor in flavors if selects(flavor, node.labels, node.gpus)),
                    workloads=tuple(on_nodes.get(node.name, ()))) for node in kept]
