"""The capacity page's GPU telemetry: per node, the GPUs its exporter reports, how many a pod
holds, how busy those are, the hottest one, and XIDs in the last day; per flavor, the GPUs its
workloads hold and how busy those are; and the hottest GPUs. Two metrics queries and one
database query whatever the cluster's size.

Which flavor a held GPU is allocated as is the workload's, which jobs knows: jobs registers how
to read it (the hook `FLAVOR_OF_PODS`, see portal.hooks)."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from portal.hooks import Hook
from portal.metrics import MetricsError, PodKey, metrics
from portal.metrics.base import GpuReading
from tenants.models import Team

WINDOW = dt.timedelta(minutes=5)
XID_WINDOW = dt.timedelta(days=1)
HOTTEST = 5
NOT_A_WORKLOAD = "(not a portal workload)"

# The flavor each pod's workload was launched on, by name; pods of no workload are left out.
FlavorOfPods = Callable[[Collection[PodKey]], Mapping[PodKey, str]]
FLAVOR_OF_PODS = Hook[FlavorOfPods]("tenants.telemetry_selectors.FLAVOR_OF_PODS", by="jobs")


@dataclass(frozen=True)
class NodeTelemetry:
    node: str
    gpus: int
    held: int
    busy_percent: float | None  # engine active of the held GPUs, averaged
    hottest_c: float | None
    xids: int


@dataclass(frozen=True)
class FlavorTelemetry:
    flavor: str
    held: int  # GPUs (or MIG instances, or shared replicas' GPUs) its workloads hold and report
    busy_percent: float | None  # their engine active, averaged


@dataclass(frozen=True)
class ClusterTelemetry:
    nodes: tuple[NodeTelemetry, ...] = ()
    flavors: tuple[FlavorTelemetry, ...] = ()
    hottest: tuple[GpuReading, ...] = ()
    unavailable: str = ""


def cluster_telemetry() -> ClusterTelemetry:
    door = metrics()
    try:
        readings = door.gpu_readings(window=WINDOW)
        namespaces = [team.namespace for team in Team.objects.only("slug")]
        xids = Counter(r.node for r in door.xid_errors(namespaces=namespaces, window=XID_WINDOW))
    except MetricsError as error:
        return ClusterTelemetry(unavailable=f"Telemetry could not be read: {error}.")
    if not readings:
        return ClusterTelemetry(unavailable="No GPU metrics: no exporter reports any GPU.")
    by_node: dict[str, list[GpuReading]] = defaultdict(list)
    for reading in readings:
        by_node[reading.node].append(reading)
    nodes = [_node_row(node, gpus, xids.get(node, 0)) for node, gpus in sorted(by_node.items())]
    hottest = sorted((r for r in readings if r.temperature_c is not None), key=lambda r: -(r.temperature_c or 0))[:HOTTEST]
    return ClusterTelemetry(nodes=tuple(nodes), flavors=_by_flavor(readings), hottest=tuple(hottest))


def _node_row(node: str, gpus: list[GpuReading], xids: int) -> NodeTelemetry:
    held = [g.engine_active for g in gpus if g.pod and g.engine_active is not None]
    temperatures = [g.temperature_c for g in gpus if g.temperature_c is not None]
    return NodeTelemetry(node=node or "(unnamed)", gpus=len(gpus), held=sum(1 for g in gpus if g.pod),
                         busy_percent=sum(held) / len(held) if held else None,
                         hottest_c=max(temperatures) if temperatures else None, xids=xids)


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs as the exporters see them now, or why there is nothing to show."""

    now: NodeTelemetry | None = None
    unavailable: str = ""


def node_telemetry(*, node: str) -> NodeGpus:
    """A node's GPUs now, for its page: one metrics query, whatever the cluster's size."""
    try:
        gpus = [reading for reading in metrics().gpu_readings(window=WINDOW) if reading.node == node]
    except MetricsError as error:
        return NodeGpus(unavailable=f"Telemetry could not be read: {error}.")
    if not gpus:
        return NodeGpus(unavailable="No exporter reports a GPU of this node.")
    return NodeGpus(now=_node_row(node, gpus, 0))


def _by_flavor(readings: list[GpuReading]) -> tuple[FlavorTelemetry, ...]:
    held = [r for r in readings if r.pod]
    flavor_of = FLAVOR_OF_PODS.call({PodKey(r.namespace, r.pod) for r in held}) if held else {}
    by_flavor: dict[str, list[float | None]] = defaultdict(list)
    for reading in held:
        by_flavor[flavor_of.get(PodKey(reading.namespace, reading.pod), NOT_A_WORKLOAD)].append(reading.engine_active)
    rows = []
    for flavor, values in sorted(by_flavor.items(), key=lambda item: (item[0] == NOT_A_WORKLOAD, item[0])):
        known = [v for v in values if v is not None]
        rows.append(FlavorTelemetry(flavor=flavor, held=len(values), busy_percent=sum(known) / len(known) if known else None))
    return tuple(rows)
