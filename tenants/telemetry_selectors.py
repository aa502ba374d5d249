"""The capacity page's GPU telemetry: per node, the GPUs its exporter reports, how many a pod
holds, how busy those are, the hottest one, and XIDs in the last day; and the hottest GPUs.
Two metrics queries whatever the cluster's size."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass

from portal.metrics import MetricsError, metrics
from portal.metrics.base import GpuReading
from tenants.models import Team

WINDOW = dt.timedelta(minutes=5)
XID_WINDOW = dt.timedelta(days=1)
HOTTEST = 5


@dataclass(frozen=True)
class NodeTelemetry:
    node: str
    gpus: int
    held: int
    busy_percent: float | None  # engine active of the held GPUs, averaged
    hottest_c: float | None
    xids: int


@dataclass(frozen=True)
class ClusterTelemetry:
    nodes: tuple[NodeTelemetry, ...] = ()
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
    nodes = []
    for node, gpus in sorted(by_node.items()):
        held = [g.engine_active for g in gpus if g.pod and g.engine_active is not None]
        temperatures = [g.temperature_c for g in gpus if g.temperature_c is not None]
        nodes.append(NodeTelemetry(node=node or "(unnamed)", gpus=len(gpus), held=sum(1 for g in gpus if g.pod),
                                   busy_percent=sum(held) / len(held) if held else None,
                                   hottest_c=max(temperatures) if temperatures else None, xids=xids.get(node, 0)))
    hottest = sorted((r for r in readings if r.temperature_c is not None), key=lambda r: -(r.temperature_c or 0))[:HOTTEST]
    return ClusterTelemetry(nodes=tuple(nodes), hottest=tuple(hottest))
