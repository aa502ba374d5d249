"""GPU telemetry through the real metrics door, over a month of dcgm-exporter data in a real Prometheus.

The issue's requirement: with 500 GPUs × 30 days of 1-minute samples in Prometheus, the workload
page's metrics p95 under 150 ms; the idle sweep over 1,000 running workloads under 2 s with one
query; the team's month of busy-vs-allocated under 300 ms.

The data set (built once, then cached under ~/.cache/gpu-portal/bench-telemetry/<parameters>/;
`--rebuild` builds it again):

- `--gpus` GPUs on nodes of 8 (the last one may have fewer). Nodes 3 and 4 are a time-sliced T4
  pool: each GPU shared four ways, each replica a slot, and a card reported once per held replica
  (label `vgpu`) with the card's figures, as busy as its pods together, as dcgm-exporter does with
  KUBERNETES_VIRTUAL_GPUS; the recording rules divide it among them. Enough GPUs, from the last
  node down, are MIG-partitioned for `--running` pods to hold a device at the end: three nodes in
  four of those as 7 × 1g.10gb, one as 2 × 3g.40gb. The other whole-GPU nodes are cut into slots of
  8, 4, 2 or 1 GPUs. With the defaults: 63 nodes, 500 GPUs, of which 124 are 7 × 1g.10gb, 40 are
  2 × 3g.40gb and 16 are time-sliced, making 320 whole GPUs, 948 MIG instances and 64 replicas,
  and 1,169 slots.
- Each slot (a MIG instance, or a set of whole GPUs on one node) runs pods one after another for
  `--days` days with gaps between them: notebooks (hours), batch jobs (tens of minutes to hours),
  training (days), inference servers (days to weeks), in `--teams` team namespaces of Zipf-like
  sizes, so there are tens of thousands of pods over a month. Exactly `--running` pods run at the
  end (one workload each), none stopped in the last 15 minutes. Three of them are the workloads
  whose page is measured: a training on 8 GPUs started at the data set's start with two restarts
  (3 pods), a 2-GPU training started a day before the end, a notebook on a MIG slice started an
  hour before the end. Twelve running pods got an XID error in the last day (one 3 minutes ago).
- Every device reports every minute what dcgm-exporter reports (its metric names, HELP texts and
  labels, from tests/telemetry/dcgm_exporter.py): DCGM_FI_PROF_GR_ENGINE_ACTIVE, FB_USED, FB_FREE,
  POWER_USAGE, GPU_TEMP and XID_ERRORS, with the namespace, pod and container of the pod holding
  it, or without them when nobody does. Left out: DCGM_FI_DEV_GPU_UTIL (nothing in the portal
  reads it) and staleness markers (a backfill cannot write them: a pod's series just stops).
- The samples are written as OpenMetrics, streamed to one file per 6 hours, each imported with
  `promtool tsdb create-blocks-from openmetrics` and deleted. The recording rules the door reads
  (deploy/prometheus/recording_rules.yaml's rules that portal/metrics/prometheus.py names, and
  those they are computed from, the shared-card attribution among them), evaluated every minute
  as there, are backfilled with `promtool tsdb create-blocks-from rules` against a Prometheus on the raw
  blocks. A Prometheus is then left to compact everything (overlapping rule blocks merged, blocks
  up to `--block-hours`: 54 h, what a Prometheus keeping 30 days compacts to) and stopped.
  Where recording rules were only added since a cached data set was built (none changed or
  removed), the new data set is that one's blocks (linked, not copied) with the added rules
  backfilled and compacted in: the rules' part of a build, not the raw samples' too.

Measured, each `--repeat` times after one untimed first call, through `PrometheusMetrics` (the
real door, over HTTP, one attempt, the production timeout of 10 s) against Debian's Prometheus
started on the cached data with `tests/telemetry/prometheus_server.py`: the workload page's
`workload_series` for the three workloads (target p95 < 150 ms each), the idle sweep's
`engine_active` over the running workloads' namespaces (p95 < 2 s, one HTTP query, answering
for every running pod), the heaviest team's `device_hours` over the whole data set from the
recording rules (p95 < 300 ms) and from raw samples (no target; at 500 GPUs Prometheus refuses
it as over its --query.max-samples, which is reported, not a failure), the capacity page's
`gpu_readings` and `xid_errors` (no target). Every answer is checked against what the data set
holds, so a broken query cannot pass as fast. The data set ends when it was built: the door's
instant queries are pinned to that time (what "now" was), the only change made to the door.

    .venv/bin/python benchmarks/telemetry.py [--gpus 500] [--days 30] [--running 1000] [--repeat 30]
    .venv/bin/python benchmarks/telemetry.py --days 2          # quick, while developing
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import hashlib
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start
from benchmarks.stats import percentile  # noqa: E402 - after the checkout is on the path
from portal.metrics.base import (  # noqa: E402 - after the checkout is on the path, as for the tests package
    ENGINE_ACTIVE,
    FB_FREE,
    FB_USED,
    POWER,
    TEMPERATURE,
    XID,
    DeviceHours,
    GpuReading,
    MetricsError,
    PodActivity,
    PodKey,
    PodSpan,
    WorkloadSeries,
    XidReport,
)
from portal.metrics.prometheus import PrometheusMetrics  # noqa: E402
from tests.telemetry.dcgm_exporter import COUNTERS, Gpu  # noqa: E402
from tests.telemetry.prometheus_server import PrometheusServer  # noqa: E402

# Bumped whenever the data set the same flags make changes, so the cache is not reused.
GENERATOR_VERSION = 2
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PRODUCTION_RULES = ROOT / "deploy" / "prometheus" / "recording_rules.yaml"
DOOR = ROOT / "portal" / "metrics" / "prometheus.py"
TARGET_MS = {"workload_page": 150, "idle_sweep": 2000, "team_month": 300}
IMPORT_HOURS = 6  # one OpenMetrics file per 6 hours: under a GB, imported and deleted in turn
NAMESPACE_PREFIX = "gpu-"
FAMILIES = [(ENGINE_ACTIVE, "engine"), (FB_USED, "fb_used"), (FB_FREE, "fb_free"), (POWER, "power"),
            (TEMPERATURE, "temperature"), (XID, "xid")]
HELP = dict(COUNTERS)

WHOLE_PATTERNS: tuple[tuple[int, ...], ...] = ((8,), (4, 4), (2, 2, 2, 2), (1,) * 8, (2, 2, 1, 1, 1, 1))
MIG = {"1g.10gb": (7, 9_856, 7), "3g.40gb": (2, 40_192, 1)}  # instances per GPU, MiB each, first GPU_I_ID
# Nodes 3 and 4 are a time-sliced T4 pool: each GPU shared four ways, each replica a slot of its
# own, reported once per held replica with the card's figures (dcgm-exporter's KUBERNETES_VIRTUAL_GPUS).
TIME_SLICED = "time-sliced"
TIME_SLICED_NODES = (3, 4)
REPLICAS = 4
T4_FB, T4_TDP = 15_360, 70
FB_WHOLE = 81_559  # MiB, an H100 80GB as the exporter reports it (used + free)
TDP = 700
XID_CODES = (13, 31, 43, 48, 79, 94)
# Per kind of pod: duration in minutes (log-normal median, sigma, clipped to min..max), engine
# active base and swing in thousandths, frame buffer used as a share of the device's.
KINDS: dict[str, dict[str, Any]] = {
    "nb": {"median": 480, "sigma": 0.9, "min": 30, "max": 4320, "base": (0, 60), "swing": (200, 600), "fb": (0.05, 0.6)},
    "batch": {"median": 90, "sigma": 1.0, "min": 10, "max": 720, "base": (300, 880), "swing": (0, 0), "fb": (0.3, 0.9)},
    "train": {"median": 2160, "sigma": 0.8, "min": 120, "max": 20160, "base": (550, 930), "swing": (0, 0),
              "fb": (0.6, 0.95)},
    "infer": {"median": 7200, "sigma": 0.7, "min": 1440, "max": 43200, "base": (80, 400), "swing": (100, 400),
              "fb": (0.4, 0.8)},
}
MIX = {"1g.10gb": {"nb": 45, "batch": 40, "infer": 15}, "3g.40gb": {"nb": 30, "train": 30, "batch": 30, "infer": 10},
       "single": {"nb": 25, "train": 35, "batch": 25, "infer": 15}, "multi": {"train": 70, "batch": 20, "infer": 10},
       TIME_SLICED: {"nb": 45, "batch": 30, "infer": 25}}
POD_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generated-name suffixes

# Engine active is carried as an index into these tables: thousandths + 100, clamped to 0..1000.
_OFFSET = 100
CLAMPED = [min(1000, max(0, i - _OFFSET)) for i in range(1300)]
ENGINE_TEXT = [f"{v / 1000:.3f}" for v in CLAMPED]
TEMPERATURE_TEXT = [str(30 + v * 45 // 1000) for v in CLAMPED]
NOISE_SIZE = 4093


def power_text(tdp: int) -> list[str]:
    idle = tdp / 10
    return [f"{idle + v * (tdp - idle) / 1000:.3f}" for v in CLAMPED]


# --- The schedule: which pod holds which device when ----------------------------------------------

@dataclass(frozen=True)
class Device:
    index: int
    node: str
    gpu: int
    uuid: str
    profile: str = ""
    instance: int = 0
    fb_total: int = FB_WHOLE
    tdp: int = TDP
    vgpu: str = ""  # a replica of a time-sliced card: the card is (node, gpu)


@dataclass
class Pod:
    namespace: str
    name: str
    workload: int
    kind: str
    start: int  # minute index into the data set (negative: started before it)
    end: int  # exclusive; the data set's length: still running at the end
    devices: tuple[Device, ...]
    base: int
    swing: int
    salt: int
    fb_used: tuple[int, ...]
    xid: dict[int, tuple[int, int]] = field(default_factory=dict)  # device index: (minute, code)


@dataclass
class Slot:
    devices: tuple[Device, ...]
    kind: str  # a MIG profile, "single" or "multi"
    running: bool = False
    pods: list[Pod] = field(default_factory=list)


@dataclass
class Schedule:
    start_ts: int
    minutes: int
    devices: list[Device]
    slots: list[Slot]
    namespaces: list[str]
    workloads: dict[str, list[Pod]]  # the measured workloads' pods, by label
    timelines: list[list[tuple[int, int, Pod | None]]]  # per device: [start, end) minute spans
    nodes: int
    mig_gpus: dict[str, int]

    @property
    def pods(self) -> list[Pod]:
        return [pod for slot in self.slots for pod in slot.pods]


def plan_nodes(gpus: int, running: int) -> list[tuple[int, str | tuple[int, ...]]]:
    """Per node: its GPUs and either a MIG profile or the sizes of its whole-GPU slots."""
    sizes = [min(8, gpus - 8 * i) for i in range(math.ceil(gpus / 8))]

    def fit(pattern: tuple[int, ...], n: int) -> tuple[int, ...]:
        slots: list[int] = []
        for size in pattern:
            if sum(slots) + size <= n:
                slots.append(size)
        return (*slots, *(1,) * (n - sum(slots)))

    layouts: list[str | tuple[int, ...]] = [fit(WHOLE_PATTERNS[i % len(WHOLE_PATTERNS)], n) for i, n in enumerate(sizes)]

    for node in TIME_SLICED_NODES:
        if node < len(sizes) - 1:  # the last node stays for MIG: small data sets keep room for their running pods
            layouts[node] = TIME_SLICED

    def slot_count() -> int:
        return sum(n * (REPLICAS if lay == TIME_SLICED else MIG[lay][0]) if isinstance(lay, str) else len(lay)
                   for n, lay in zip(sizes, layouts, strict=True))

    # Room for the running pods and some free devices; nodes 0-2 stay whole (the measured workloads).
    wanted, converted, node = math.ceil(running * 1.12) + 3, 0, len(sizes) - 1
    while slot_count() < wanted:
        if node < 3:
            raise SystemExit(f"{gpus} GPUs cannot hold {running} running pods, even partitioned: ask for fewer")
        if layouts[node] != TIME_SLICED:
            layouts[node] = "3g.40gb" if converted % 4 == 3 else "1g.10gb"
            converted += 1
        node -= 1
    return list(zip(sizes, layouts, strict=True))


def _uuid(node: int, gpu: int) -> str:
    h = hashlib.sha1(f"{node}/{gpu}".encode()).hexdigest()  # noqa: S324 - a name, not a secret
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def build_schedule(*, gpus: int, days: int, running: int, teams: int, seed: int, end_ts: int) -> Schedule:
    rng = random.Random(seed)
    minutes = days * 1440
    devices: list[Device] = []
    slots: list[Slot] = []
    mig_gpus = dict.fromkeys(MIG, 0)
    layout = plan_nodes(gpus, running)
    for n, (count, lay) in enumerate(layout):
        node = f"gpu-node-{n:03d}"
        if lay == TIME_SLICED:
            for g in range(count):
                for r in range(REPLICAS):
                    devices.append(Device(len(devices), node, g, _uuid(n, g), fb_total=T4_FB, tdp=T4_TDP, vgpu=str(r)))
                    slots.append(Slot((devices[-1],), TIME_SLICED))
        elif isinstance(lay, str):
            instances, fb, first_id = MIG[lay]
            mig_gpus[lay] += count
            for g in range(count):
                for i in range(instances):
                    devices.append(Device(len(devices), node, g, _uuid(n, g), lay, first_id + i, fb, TDP))
                    slots.append(Slot((devices[-1],), lay))
        else:
            g = 0
            for size in lay:
                made = []
                for _ in range(size):
                    devices.append(Device(len(devices), node, g, _uuid(n, g)))
                    made.append(devices[-1])
                    g += 1
                slots.append(Slot(tuple(made), "multi" if size > 1 else "single"))
    if running > len(slots) - 3:
        raise SystemExit(f"{len(slots)} device slots cannot hold {running} running pods")
    namespaces = [f"{NAMESPACE_PREFIX}team-{i:03d}" for i in range(teams)]
    weights = [1 / (i + 1) ** 0.9 for i in range(teams)]

    # The measured workloads' slots: 8 GPUs on node 0, 2 GPUs (the first such slot), a MIG slice.
    w30 = next(s for s in slots if len(s.devices) == 8)
    w1d = next(s for s in slots if len(s.devices) == 2)
    w1h = next((s for s in slots if s.kind == "1g.10gb"), None) or next(s for s in slots if s.kind == "single")
    others = [s for s in slots if s not in (w30, w1d, w1h)]
    for slot in (w30, w1d, w1h, *rng.sample(others, running - 3)):
        slot.running = True

    workload_ids = iter(range(1, 10**9))

    def make_pod(slot: Slot, kind: str, start: int, end: int, namespace: str | None = None,
                 workload: int | None = None) -> Pod:
        spec = KINDS[kind]
        wid = workload if workload is not None else next(workload_ids)
        suffix = "".join(rng.choice(POD_ALPHABET) for _ in range(5))
        return Pod(namespace=namespace or rng.choices(namespaces, weights)[0], name=f"{kind}-{wid:06d}-{suffix}",
                   workload=wid, kind=kind, start=start, end=end, devices=slot.devices,
                   base=rng.randint(*spec["base"]), swing=rng.randint(*spec["swing"]), salt=rng.randrange(3),
                   fb_used=tuple(int(d.fb_total * rng.uniform(*spec["fb"])) for d in slot.devices))

    def duration(kind: str) -> int:
        spec = KINDS[kind]
        return int(min(spec["max"], max(spec["min"], rng.lognormvariate(math.log(spec["median"]), spec["sigma"]))))

    def gap() -> int:
        return int(min(720, 2 + rng.expovariate(1 / 60)))

    def fill_before(slot: Slot, t: int) -> None:
        """Pods one after another going back from minute t, until before the data set starts."""
        mix = MIX[slot.kind]
        while t > 0:
            kind = rng.choices(list(mix), list(mix.values()))[0]
            start = t - duration(kind)
            slot.pods.append(make_pod(slot, kind, start, t))
            t = start - gap()

    workloads: dict[str, list[Pod]] = {}
    # A training started at the data set's start and restarted twice (a pod each time).
    wid = next(workload_ids)
    cuts = [0, minutes // 3, 2 * minutes // 3, minutes]
    w30.pods = [make_pod(w30, "train", cuts[i] + (2 if i else 0), cuts[i + 1], namespace=namespaces[0], workload=wid)
                for i in range(3)][::-1]
    workloads[f"{days} days old, 8 GPUs, 3 pods"] = sorted(w30.pods, key=lambda p: p.start)
    w1d.pods = [make_pod(w1d, "train", minutes - 1440, minutes, namespace=namespaces[min(1, teams - 1)])]
    workloads["1 day old, 2 GPUs"] = list(w1d.pods)
    fill_before(w1d, minutes - 1440 - gap())
    w1h.pods = [make_pod(w1h, "nb", minutes - 60, minutes, namespace=namespaces[0])]
    workloads[f"1 hour old, {w1h.kind if w1h.kind in MIG else '1 GPU'}"] = list(w1h.pods)
    fill_before(w1h, minutes - 60 - gap())
    for slot in others:
        if slot.running:
            mix = MIX[slot.kind]
            kind = rng.choices(list(mix), list(mix.values()))[0]
            start = minutes - duration(kind)
            slot.pods.append(make_pod(slot, kind, start, minutes))
            fill_before(slot, start - gap())
        else:
            fill_before(slot, minutes - 15 - int(rng.expovariate(1 / 90)))
    for slot in slots:
        slot.pods.sort(key=lambda p: p.start)

    # XID errors on a dozen running pods within the last day, one of them 3 minutes ago.
    candidates = [s.pods[-1] for s in others if s.running and s.pods[-1].start < minutes - 30]
    for n, pod in enumerate(rng.sample(candidates, min(12, len(candidates)))):
        at = minutes - 3 if n == 0 else max(pod.start + 5, minutes - rng.randint(15, 1380))
        pod.xid[rng.choice(pod.devices).index] = (at, rng.choice(XID_CODES))

    timelines: list[list[tuple[int, int, Pod | None]]] = [[] for _ in devices]
    for slot in slots:
        t = 0
        for pod in slot.pods:
            if pod.end <= 0:
                continue
            if pod.start > t:
                for d in slot.devices:
                    timelines[d.index].append((t, pod.start, None))
            for d in slot.devices:
                timelines[d.index].append((max(pod.start, 0), pod.end, pod))
            t = pod.end
        if t < minutes:
            for d in slot.devices:
                timelines[d.index].append((t, minutes, None))
    return Schedule(start_ts=end_ts - (minutes - 1) * 60, minutes=minutes, devices=devices, slots=slots,
                    namespaces=namespaces, workloads=workloads, timelines=timelines, nodes=len(layout), mig_gpus=mig_gpus)


# --- OpenMetrics, streamed a window at a time ------------------------------------------------------

def _noise(seed: int) -> list[int]:
    rng = random.Random(seed * 7919)
    return [max(-40, min(40, int(rng.gauss(0, 15)))) for _ in range(NOISE_SIZE)]


def engine_indices(pod: Pod | None, device: Device, lo: int, hi: int, *, day0: int, noise: list[int]) -> list[int]:
    """Engine active over minutes lo..hi as indices into ENGINE_TEXT (thousandths + 100)."""
    if pod is None:
        return [_OFFSET] * (hi - lo)
    n, size, salt, base = noise, NOISE_SIZE, device.index * 31, pod.base + _OFFSET
    if pod.kind in ("train", "batch"):
        return [base + n[(m * 7 + salt) % size] for m in range(lo, hi)]
    swing, tilt = pod.swing, pod.salt
    if pod.kind == "infer":  # busier by day, a sine over the day
        return [base + int(swing * (0.5 + 0.5 * math.sin((m + day0) * math.pi / 720))) + n[(m * 7 + salt) % size]
                for m in range(lo, hi)]
    # A notebook: someone works in it 9:00-18:00 on two days in three, idle otherwise.
    return [base + (swing if 540 <= (m + day0) % 1440 < 1080 and ((m + day0) // 1440 + tilt) % 3 else 0)
            + n[(m * 7 + salt) % size] for m in range(lo, hi)]


@dataclass
class Totals:
    series: set[tuple[int, str]] = field(default_factory=set)  # (device, pod) label sets reported
    samples: int = 0
    text_bytes: int = 0
    by_namespace: dict[str, list[float]] = field(default_factory=dict)  # device-minutes, engine sum (ratio)


def write_window(path: Path, schedule: Schedule, w0: int, w1: int, totals: Totals, noise: list[int]) -> None:
    """Minutes w0..w1 of every device as one OpenMetrics exposition: each family's series one after
    another, each series' samples in time order, `# EOF` at the end."""
    ts = [f" {schedule.start_ts + 60 * m}\n" for m in range(w0, w1)]
    day0 = schedule.start_ts // 60 % 1440
    power = {d.tdp: power_text(d.tdp) for d in schedule.devices}
    segments = []
    # A time-sliced card's minutes: as busy as its held replicas' pods together, and how many are held.
    card_busy: dict[str, list[int]] = {}
    card_held: dict[str, list[int]] = {}
    shared: list[tuple[Device, Pod, int, int]] = []
    for device in schedule.devices:
        for a, b, pod in schedule.timelines[device.index]:
            lo, hi = max(a, w0), min(b, w1)
            if lo >= hi:
                continue
            values = engine_indices(pod, device, lo, hi, day0=day0, noise=noise)
            if device.vgpu:
                if pod is None:
                    continue  # a replica nobody holds is not reported
                busy = card_busy.setdefault(device.uuid, [0] * (w1 - w0))
                held = card_held.setdefault(device.uuid, [0] * (w1 - w0))
                for m, v in zip(range(lo - w0, hi - w0), values, strict=True):
                    busy[m] += CLAMPED[v]
                    held[m] += 1
                shared.append((device, pod, lo, hi))
                continue
            labels = Gpu(node=device.node, gpu=device.gpu, uuid=device.uuid, namespace=pod.namespace if pod else "",
                         pod=pod.name if pod else "", mig_profile=device.profile, mig_instance=device.instance).labels()
            segments.append((device, pod, lo, hi, values, labels))
            totals.series.add((device.index, pod.name if pod else ""))
            if pod is not None:
                stats = totals.by_namespace.setdefault(pod.namespace, [0.0, 0.0])
                stats[0] += hi - lo
                stats[1] += sum(CLAMPED[v] for v in values) / 1000
    for device, pod, lo, hi in shared:
        busy, held = card_busy[device.uuid][lo - w0:hi - w0], card_held[device.uuid][lo - w0:hi - w0]
        values = [min(1000, v) + _OFFSET for v in busy]
        labels = Gpu(node=device.node, gpu=device.gpu, uuid=device.uuid, namespace=pod.namespace, pod=pod.name,
                     vgpu=device.vgpu).labels()
        segments.append((device, pod, lo, hi, values, labels))
        totals.series.add((device.index, pod.name))
        stats = totals.by_namespace.setdefault(pod.namespace, [0.0, 0.0])
        stats[0] += sum(1 / n for n in held)  # each held replica at its share of the card
        stats[1] += sum(min(1000, v) / 1000 / n for v, n in zip(busy, held, strict=True))
    with path.open("w") as out:
        for metric, kind in FAMILIES:
            out.write(f"# HELP {metric} {HELP[metric]}\n# TYPE {metric} gauge\n")
            for device, pod, lo, hi, values, labels in segments:
                prefix = f"{metric}{{{labels}}} "
                stamps = ts[lo - w0:hi - w0]
                slot = pod.devices.index(device) if pod else 0
                if kind == "engine":
                    out.write("".join([prefix + ENGINE_TEXT[v] + t for v, t in zip(values, stamps, strict=True)]))
                elif kind == "power":
                    text = power[device.tdp]
                    out.write("".join([prefix + text[v] + t for v, t in zip(values, stamps, strict=True)]))
                elif kind == "temperature":
                    out.write("".join([prefix + TEMPERATURE_TEXT[v] + t for v, t in zip(values, stamps, strict=True)]))
                elif kind in ("fb_used", "fb_free"):
                    used = pod.fb_used[slot] if pod else 0
                    line = prefix + str(used if kind == "fb_used" else device.fb_total - used)
                    out.write("".join([line + t for t in stamps]))
                else:
                    at, code = pod.xid.get(device.index, (hi, 0)) if pod else (hi, 0)
                    split = min(max(at, lo), hi) - lo
                    zero, error = prefix + "0", prefix + str(code)
                    out.write("".join([zero + t for t in stamps[:split]] + [error + t for t in stamps[split:]]))
                totals.samples += hi - lo
        out.write("# EOF\n")
    totals.text_bytes += path.stat().st_size


# --- Building the data set --------------------------------------------------------------------------

def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) is not None


def production_rules(rules_path: Path = PRODUCTION_RULES, door_path: Path = DOOR) -> list[dict[str, Any]]:
    """deploy/prometheus's recording rules that the door reads (those whose names its source
    quotes) and those they are computed from, in the rules file's groups and order, each group
    with its interval: what the benchmark backfills. A rule the door starts reading is backfilled
    without changing this file."""
    door = door_path.read_text()
    groups = yaml.safe_load(rules_path.read_text())["groups"]
    found = {r["record"]: r for g in groups for r in g["rules"] if "record" in r}
    wanted = {name for name in found if f'"{name}"' in door}
    if not wanted:
        raise SystemExit(f"{door_path} reads none of {rules_path}'s recording rules")
    while extra := {n for w in wanted for n in found if n not in wanted and _mentions(found[w]["expr"], n)}:
        wanted |= extra
    chosen = [{"name": g["name"], "interval": g.get("interval", "1m"),
               "rules": [r for r in g["rules"] if r.get("record") in wanted]} for g in groups]
    return [group for group in chosen if group["rules"]]


def rule_levels(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups split into passes so that a rule reading another recorded series comes in a
    later pass (promtool's rule backfill reads only what the Prometheus it queries holds), each
    pass one group's rules at one level, evaluated at that group's interval."""
    level: dict[str, int] = {}
    for group in groups:  # a rule follows those it reads in the rules file, as Prometheus evaluates them
        for rule in group["rules"]:
            level[rule["record"]] = 1 + max((level[n] for n in level if _mentions(rule["expr"], n)), default=-1)
    return [{**group, "rules": at} for n in range(max(level.values(), default=-1) + 1) for group in groups
            if (at := [r for r in group["rules"] if level[r["record"]] == n])]


def _by_record(groups: list[dict[str, Any]] | dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each rule by its name, with its group's interval (a manifest from before groups holds one)."""
    return {rule["record"]: (group.get("interval", "1m"), rule)
            for group in ([groups] if isinstance(groups, dict) else groups) for rule in group["rules"]}


class BenchPrometheus(PrometheusServer):
    """The tests' Prometheus on the benchmark's data, without the harness's half-second rules
    (the data set has them backfilled; evaluated at the wall clock's now they would write into the
    cached data) and compacting blocks up to `block_hours`, as a Prometheus keeping a month does."""

    def __init__(self, data_dir: Path, block_hours: int) -> None:
        super().__init__(scrape_targets=[], data_dir=data_dir,
                         extra_flags=[f"--storage.tsdb.max-block-duration={block_hours}h"])
        (self.work / "prometheus.yml").write_text("global:\n  evaluation_interval: 1m\n")

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith((name + " ", name + "{")):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


def block_metas(data_dir: Path) -> list[dict[str, Any]]:
    metas = []
    for meta in sorted(data_dir.glob("*/meta.json")):
        if ".tmp" not in meta.parent.name:
            metas.append(json.loads(meta.read_text()))
    return sorted(metas, key=lambda m: m["minTime"])


def overlapping(metas: list[dict[str, Any]]) -> bool:
    return any(b["minTime"] < a["maxTime"] for a, b in zip(metas, metas[1:], strict=False))


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(cache: Path, args: argparse.Namespace, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes the data set, with `rules` backfilled, into `cache` and returns its manifest (also
    written there, last)."""
    if cache.exists():
        shutil.rmtree(cache)
    data, work = cache / "data", cache / "work"
    data.mkdir(parents=True)
    work.mkdir()
    started = time.perf_counter()
    end_ts = int(time.time()) // 60 * 60
    schedule = build_schedule(gpus=args.gpus, days=args.days, running=args.running, teams=args.teams, seed=args.seed,
                              end_ts=end_ts)
    noise = _noise(args.seed)
    totals = Totals()
    step = IMPORT_HOURS * 3600
    first = schedule.start_ts // step * step
    windows = [(max(0, (w - schedule.start_ts) // 60), min(schedule.minutes, -(-(w + step - schedule.start_ts) // 60)))
               for w in range(first, end_ts + 1, step)]
    generate_s = import_s = 0.0
    for n, (w0, w1) in enumerate(windows):
        path = work / "window.om"
        t0 = time.perf_counter()
        write_window(path, schedule, w0, w1, totals, noise)
        t1 = time.perf_counter()
        subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                        f"--max-block-duration={IMPORT_HOURS}h", str(path), str(data)], check=True, capture_output=True)
        path.unlink()
        generate_s, import_s = generate_s + t1 - t0, import_s + time.perf_counter() - t1
        print(f"  raw samples: window {n + 1} of {len(windows)} (generated {generate_s:.0f} s, imported {import_s:.0f} s, "
              f"{totals.text_bytes / 1e9:.1f} GB of OpenMetrics so far)", file=sys.stderr, flush=True)
    raw_s = time.perf_counter() - started

    t0 = time.perf_counter()
    rule_metas = backfill_rules(data, work, rules, start_ts=schedule.start_ts, end_ts=end_ts, block_hours=args.block_hours)
    rules_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compact(data, args.block_hours)
    compact_s = time.perf_counter() - t0
    shutil.rmtree(work)
    metas = block_metas(data)

    pods = schedule.pods
    running = [p for p in pods if p.end == schedule.minutes]
    unshared = [d for d in schedule.devices if not d.vgpu]
    held_cards = {d.uuid for p in running for d in p.devices if d.vgpu}
    device_minutes = {ns: stats[0] for ns, stats in totals.by_namespace.items()}
    team = max(device_minutes, key=lambda ns: device_minutes[ns])
    team_pods = [p for p in pods if p.namespace == team and p.end > 0]

    def hour(minute: int) -> int:
        return (schedule.start_ts + 60 * minute) // 3600

    # Each pod's devices, for every clock hour it reported in, and one more (the lookback after it).
    hours_touched = sum(len(p.devices) * (hour(min(p.end, schedule.minutes) - 1) - hour(max(p.start, 0)) + 2)
                        for p in team_pods)
    manifest = {
        "generator_version": GENERATOR_VERSION,
        "parameters": parameters(args), "rules": rules,
        "start_ts": schedule.start_ts, "end_ts": end_ts, "minutes": schedule.minutes,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "build_seconds": {"raw_generate": round(generate_s), "raw_import": round(import_s), "raw_total": round(raw_s),
                          "rules": round(rules_s), "compaction": round(compact_s),
                          "total": round(time.perf_counter() - started)},
        "nodes": schedule.nodes, "gpus": args.gpus, "mig_gpus": schedule.mig_gpus,
        # What the exporter reports at the end: every whole GPU and MIG instance, and each time-sliced
        # card some running pod holds a replica of (its replicas are the device slots).
        "devices": len(unshared) + len(held_cards), "time_sliced_gpus": len({d.uuid for d in schedule.devices if d.vgpu}),
        "slots": len(schedule.slots), "pods": sum(1 for p in pods if p.end > 0), "teams": len(schedule.namespaces),
        "raw_series": len(totals.series) * len(FAMILIES), "raw_samples": totals.samples,
        "openmetrics_bytes": totals.text_bytes,
        "recorded_samples": sum(m["stats"]["numSamples"] for m in rule_metas),
        "blocks": len(metas), "block_samples": sum(m["stats"]["numSamples"] for m in metas),
        "block_series_summed": sum(m["stats"]["numSeries"] for m in metas), "bytes_on_disk": disk_bytes(data),
        "running": sorted([p.namespace, p.name] for p in running),
        "running_devices": sum(1 for p in running for d in p.devices if not d.vgpu) + len(held_cards),
        "workloads": [{"label": label, "namespace": ps[0].namespace, "devices": len(ps[0].devices),
                       "fb_total": ps[0].devices[0].fb_total,
                       "pods": [{"name": p.name, "start_ts": schedule.start_ts + 60 * p.start,
                                 "end_ts": None if p.end == schedule.minutes else schedule.start_ts + 60 * p.end}
                                for p in ps]} for label, ps in schedule.workloads.items()],
        "team": {"namespace": team, "device_hours": device_minutes[team] / 60,
                 "busy_hours": totals.by_namespace[team][1] / 60, "hours_touched": hours_touched,
                 "pods": len(team_pods)},
        "xid": [{"namespace": p.namespace, "pod": p.name, "minute": at}
                for p in running for at, _ in p.xid.values()],
    }
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def backfill_rules(data: Path, work: Path, rules: list[dict[str, Any]], *, start_ts: int, end_ts: int,
                   block_hours: int) -> list[dict[str, Any]]:
    """The recording rules, each group's evaluated at its interval over the whole data set by a
    Prometheus on it; those reading other recorded series once those are in the data. Returns the
    new blocks' metas."""
    rule_metas = []
    for n, group in enumerate(rule_levels(rules)):
        rules_file, rules_out = work / f"rules-{n}.yml", work / f"rules-blocks-{n}"
        rules_file.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
        server = BenchPrometheus(data, block_hours)
        server.start(timeout=600)
        try:
            subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "rules", f"--url={server.url}",
                            f"--start={start_ts}", f"--end={end_ts}", f"--output-dir={rules_out}",
                            f"--eval-interval={group['interval']}", str(rules_file)], check=True, capture_output=True)
        finally:
            server.stop()
        rule_metas += block_metas(rules_out)
        for block in rules_out.iterdir():
            if (block / "meta.json").exists():
                block.rename(data / block.name)
    return rule_metas


def compact(data: Path, block_hours: int) -> None:
    """Compaction, as the Prometheus serving it would do in its first minutes, done here: not while
    measuring. Its loop compacts until nothing is left; the next minute's trigger means it is done."""
    server = BenchPrometheus(data, block_hours)
    server.start(timeout=600)
    try:
        deadline = time.monotonic() + 3600
        while server.metric("prometheus_tsdb_compactions_triggered_total") < 2 or overlapping(block_metas(data)):
            if time.monotonic() > deadline:
                raise SystemExit("Prometheus did not finish compacting the data set within an hour")
            if server.metric("prometheus_tsdb_compactions_failed_total"):
                raise SystemExit(f"Prometheus failed to compact the data set: {server.log_tail()}")
            time.sleep(5)
    finally:
        server.stop()


def extendable(caches: Path, args: argparse.Namespace, rules: list[dict[str, Any]]) -> tuple[Path, dict[str, Any]] | None:
    """A cached data set built with the same parameters and some of `rules`, the others being
    only added since (none changed, moved to another interval or removed): backfilling those onto a
    copy of it gives what a build would, in the rules' time instead of the raw samples' too."""
    wanted = _by_record(rules)
    for manifest_path in sorted(caches.glob("*/manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        if (manifest.get("generator_version") != GENERATOR_VERSION or manifest.get("parameters") != parameters(args)
                or not manifest.get("rules")):
            continue
        had = _by_record(manifest["rules"])
        if all(wanted.get(name) == rule for name, rule in had.items()) and len(had) < len(wanted):
            return manifest_path.parent, manifest
    return None


def extend(base: Path, manifest: dict[str, Any], cache: Path, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """`base`'s data set with the rules it lacks backfilled, written into `cache`; its manifest."""
    if cache.exists():
        shutil.rmtree(cache)
    data, work = cache / "data", cache / "work"
    work.mkdir(parents=True)
    started = time.perf_counter()
    # Blocks are never written once made (compaction writes new ones), so they are linked, not
    # copied; the write-ahead log and head chunks are appended to, so they are copied.
    data.mkdir()
    for entry in (base / "data").iterdir():
        if (entry / "meta.json").exists():
            shutil.copytree(entry, data / entry.name, copy_function=os.link)
        elif entry.is_dir():
            shutil.copytree(entry, data / entry.name)
    have = _by_record(manifest["rules"])
    added = [group for group in ({**g, "rules": [r for r in g["rules"] if r["record"] not in have]} for g in rules)
             if group["rules"]]
    print(f"Backfilling {sum(len(g['rules']) for g in added)} added rules onto a copy of {base} ...", file=sys.stderr,
          flush=True)
    block_hours = manifest["parameters"]["block_hours"]
    t0 = time.perf_counter()
    rule_metas = backfill_rules(data, work, added, start_ts=manifest["start_ts"], end_ts=manifest["end_ts"],
                                block_hours=block_hours)
    rules_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compact(data, block_hours)
    compact_s = time.perf_counter() - t0
    shutil.rmtree(work)
    metas = block_metas(data)
    manifest = {
        **manifest, "rules": rules, "extended_from": base.name,
        "extended_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "build_seconds": {**manifest["build_seconds"], "rules_added": round(rules_s),
                          "compaction_after_rules_added": round(compact_s),
                          "extension_total": round(time.perf_counter() - started)},
        "recorded_samples": manifest["recorded_samples"] + sum(m["stats"]["numSamples"] for m in rule_metas),
        "blocks": len(metas), "block_samples": sum(m["stats"]["numSamples"] for m in metas),
        "block_series_summed": sum(m["stats"]["numSeries"] for m in metas), "bytes_on_disk": disk_bytes(data),
    }
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def parameters(args: argparse.Namespace) -> dict[str, int]:
    return {k: getattr(args, k) for k in ("gpus", "days", "running", "teams", "seed", "block_hours")}


# --- Measuring --------------------------------------------------------------------------------------

class BenchDoor(PrometheusMetrics):
    """The real door, its instant queries pinned to the data set's end ("now" when it was built),
    counting the HTTP requests it sends."""

    def __init__(self, url: str, *, now: dt.datetime, **kwargs: Any) -> None:
        super().__init__(url, max_attempts=1, **kwargs)
        self.now = now
        self.requests = 0

    def query(self, promql: str, *, at: dt.datetime | None = None) -> list[dict[str, Any]]:
        return super().query(promql, at=at or self.now)

    def _once(self, path: str, fields: dict[str, str]) -> list[dict[str, Any]] | MetricsError:
        self.requests += 1
        return super()._once(path, fields)


def timed(name: str, door: BenchDoor, call: Callable[[], Any], check: Callable[[Any], str], *, repeat: int,
          target_ms: int | None, may_refuse: str = "") -> dict[str, Any]:
    """Times `call` `repeat` times after an untimed first one; `check` says what is wrong with an
    answer ("" when it is plausible). Each call must be one HTTP request. `may_refuse`: a refusal
    (a part of its words) that is a finding to report rather than a failure."""
    row: dict[str, Any] = {"name": name, "target_ms": target_ms, "repeat": repeat}
    try:
        door.requests = 0
        t0 = time.perf_counter()
        answer = call()
        row["first_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        problems = [check(answer)]
        requests = {door.requests}
        times = []
        for _ in range(repeat):
            door.requests = 0
            t0 = time.perf_counter()
            answer = call()
            times.append((time.perf_counter() - t0) * 1000)
            requests.add(door.requests)
        problems.append(check(answer))
    except MetricsError as error:
        row.update(error=str(error), met=bool(may_refuse) and may_refuse in str(error))
        return row
    times.sort()
    p95 = percentile(times, 0.95)
    if requests != {1}:
        problems.append(f"{sorted(requests)} HTTP requests per call, not one")
    row.update(p50_ms=round(statistics.median(times), 1), p95_ms=round(p95, 1), max_ms=round(times[-1], 1),
               requests=sorted(requests), problems=sorted({p for p in problems if p}))
    row["met"] = not row["problems"] and (target_ms is None or p95 < target_ms)
    return row


def check_series(workload: dict[str, Any], start: dt.datetime, end: dt.datetime) -> Callable[[WorkloadSeries], str]:
    def check(series: WorkloadSeries) -> str:
        steps = int((end - start).total_seconds()) // series.step_seconds + 1
        total = workload["devices"] * workload["fb_total"]
        named = {"engine active": series.engine_active, "memory used": series.memory_used_mib,
                 "memory total": series.memory_total_mib, "power": series.power_watts, "temperature": series.temperature_c}
        for label, points in named.items():
            if len(points) < 0.95 * steps:
                return f"{label}: {len(points)} points of {steps}"
        if not all(0 <= p.value <= 100 for p in series.engine_active):
            return "engine active outside 0..100 %"
        if not all(abs(p.value - total) <= 1 for p in series.memory_total_mib):
            return f"memory total is not {total} MiB throughout"
        if not all(0 < p.value <= workload["devices"] * TDP for p in series.power_watts):
            return "power out of range"
        if not all(20 <= p.value <= 100 for p in series.temperature_c):
            return "temperature out of range"
        return ""

    return check


def check_sweep(expected: set[PodKey]) -> Callable[[PodActivity], str]:
    def check(activity: PodActivity) -> str:
        found = set(activity.by_pod)
        if found != expected:
            return f"answered for {len(found)} pods: {len(expected - found)} running ones missing, {len(found - expected)} others"
        if not all(0 <= v <= 100 for v in activity.by_pod.values()):
            return "engine active outside 0..100 %"
        return ""

    return check


def check_hours(team: dict[str, Any]) -> Callable[[dict[str, DeviceHours]], str]:
    """Covered device-hours: at least the minutes the team's devices reported, at most each pod's
    devices counted for every hour it touched plus one (the door counts a pod's partial hours whole)."""

    def check(hours: dict[str, DeviceHours]) -> str:
        found = hours.get(team["namespace"])
        if found is None or set(hours) != {team["namespace"]}:
            return f"answered for {sorted(hours)}"
        low, high = 0.97 * team["device_hours"], 1.02 * team["hours_touched"]
        if not low <= found.covered <= high:
            return f"{found.covered:.0f} device-hours covered, expected {low:.0f}..{high:.0f}"
        expected_ratio = team["busy_hours"] / team["device_hours"]
        if not 0 <= found.busy <= found.covered or abs(found.busy / found.covered - expected_ratio) > 0.1:
            return f"{found.busy:.0f} busy of {found.covered:.0f} covered, expected about {expected_ratio:.0%} busy"
        return ""

    return check


def check_readings(devices: int, held: int) -> Callable[[list[GpuReading]], str]:
    def check(readings: list[GpuReading]) -> str:
        if len(readings) != devices:
            return f"{len(readings)} devices, expected {devices}"
        if not all(r.engine_active is not None and 0 <= r.engine_active <= 100 and r.temperature_c for r in readings):
            return "a device without engine active or temperature"
        if sum(1 for r in readings if r.pod) != held:
            return f"{sum(1 for r in readings if r.pod)} devices held by a pod, expected {held}"
        return ""

    return check


def check_xid(expected: int) -> Callable[[list[XidReport]], str]:
    def check(reports: list[XidReport]) -> str:
        return "" if len(reports) == expected else f"{len(reports)} XID reports, expected {expected}"

    return check


def measure(url: str, manifest: dict[str, Any], repeat: int, raw_repeat: int) -> list[dict[str, Any]]:
    end = dt.datetime.fromtimestamp(manifest["end_ts"], dt.UTC)
    start = dt.datetime.fromtimestamp(manifest["start_ts"], dt.UTC)
    door = BenchDoor(url, now=end)
    rows = []
    for workload in manifest["workloads"]:
        spans = [PodSpan(p["name"], started_at=dt.datetime.fromtimestamp(p["start_ts"], dt.UTC),
                         ended_at=None if p["end_ts"] is None else dt.datetime.fromtimestamp(p["end_ts"], dt.UTC))
                 for p in workload["pods"]]
        # As jobs/telemetry.py asks: from the first pod's start to the last one's end (now while running).
        first = max(min(s.started_at for s in spans), start)
        rows.append(timed(f"workload page: {workload['label']}", door,
                          functools.partial(door.workload_series, namespace=workload["namespace"], pods=spans,
                                            start=first, end=end),
                          check_series(workload, first, end), repeat=repeat, target_ms=TARGET_MS["workload_page"]))
    running = {PodKey(ns, pod) for ns, pod in manifest["running"]}
    namespaces = {key.namespace for key in running}
    # jobs/reclaim.py's idle sweep: one query for every running workload's namespace, 5 minutes.
    rows.append(timed(f"idle sweep: {len(running)} running pods, {len(namespaces)} namespaces", door,
                      lambda: door.engine_active(namespaces=namespaces, window=dt.timedelta(minutes=5)),
                      check_sweep(running), repeat=repeat, target_ms=TARGET_MS["idle_sweep"]))
    team = manifest["team"]
    # billing/usage/efficiency.py's month, here the whole data set, for the team with the most device-hours.
    rows.append(timed(f"team's month: {team['namespace']} ({team['device_hours']:.0f} device-hours, {team['pods']} pods)",
                      door, lambda: door.device_hours(namespaces=[team["namespace"]], start=start, end=end),
                      check_hours(team), repeat=repeat, target_ms=TARGET_MS["team_month"]))
    raw = BenchDoor(url, now=end, use_recording_rules=False, timeout=120)
    # Without the recording rules, a month reads every pod series of the team: at 500 GPUs more
    # samples than Prometheus loads in one query by default (--query.max-samples, 50 million), a
    # refusal the door says in words, pointing at the rules.
    rows.append(timed("team's month from raw samples (use_recording_rules=False)", raw,
                      lambda: raw.device_hours(namespaces=[team["namespace"]], start=start, end=end),
                      check_hours(team), repeat=raw_repeat, target_ms=None, may_refuse="--query.max-samples"))
    # The capacity page (tenants/telemetry_selectors.py): every device now, XIDs over a day.
    rows.append(timed(f"capacity page: gpu_readings ({manifest['devices']} devices)", door,
                      lambda: door.gpu_readings(window=dt.timedelta(minutes=5)),
                      check_readings(manifest["devices"], manifest["running_devices"]), repeat=repeat, target_ms=None))
    last = manifest["minutes"]
    for label, window in (("1 day, capacity page", dt.timedelta(days=1)), ("10 minutes, XID job", dt.timedelta(minutes=10))):
        # changes() needs the sample before the error in the window too.
        expected = sum(1 for x in manifest["xid"] if x["minute"] > last - window.total_seconds() // 60)
        rows.append(timed(f"xid_errors over {label}", door,
                          functools.partial(door.xid_errors, namespaces=namespaces, window=window),
                          check_xid(expected), repeat=repeat, target_ms=None))
    return rows


# --- Reporting --------------------------------------------------------------------------------------

def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def report(manifest: dict[str, Any], rows: list[dict[str, Any]], *, reused: bool, cache: Path,
           load: tuple[float, float]) -> None:
    m, b = manifest, manifest["build_seconds"]
    mig = ", ".join([f"{n} as {profile}" for profile, n in m["mig_gpus"].items() if n]
                    + ([f"{m['time_sliced_gpus']} time-sliced {REPLICAS} ways"] if m.get("time_sliced_gpus") else []))
    print(f"GPU telemetry benchmark: {m['gpus']} GPUs on {m['nodes']} nodes ({mig or 'no MIG'}), {m['devices']} devices, "
          f"{m['parameters']['days']} days of 1-minute samples, {len(m['running'])} running pods in {m['teams']} team namespaces")
    print(f"Data set {'reused' if reused else 'built'}: {cache} (built {m['built_at']}, "
          f"in {b['total'] // 60} min {b['total'] % 60} s: raw samples generated {b['raw_generate']} s and imported "
          f"{b['raw_import']} s, recording rules {b['rules']} s, compaction {b['compaction']} s)")
    print(f"  {m['pods']:,} pods; {m['raw_series']:,} raw series and {m['raw_samples']:,} raw samples "
          f"({len(FAMILIES)} metrics: {', '.join(name for name, _ in FAMILIES)}; {_size(m['openmetrics_bytes'])} "
          f"of OpenMetrics); {m['recorded_samples']:,} recorded samples; {m['blocks']} blocks holding "
          f"{m['block_samples']:,} samples; {_size(m['bytes_on_disk'])} on disk")
    print("  Left out: DCGM_FI_DEV_GPU_UTIL (the portal does not read it) and staleness markers (backfill cannot "
          "write them).")
    print(f"Timings in ms, after one untimed first call. A shared 2-core machine, its load average {load[0]:.1f} when "
          f"measuring began and {load[1]:.1f} when it ended: expect noise.")
    width = max(len(r["name"]) for r in rows)
    print(f"  {'':{width}}  {'first':>8} {'p50':>8} {'p95':>8} {'max':>8} {'n':>3}  {'target':>7}  result")
    for r in rows:
        target = f"< {r['target_ms']}" if r["target_ms"] else "-"
        if "error" in r:
            print(f"  {r['name']:{width}}  {'refused, as expected' if r['met'] else 'failed'}: {r['error']}")
            continue
        verdict = "met" if r["met"] else "MISSED"
        if r["target_ms"] is None:
            verdict = "ok" if r["met"] else "WRONG"
        problems = f" ({'; '.join(r['problems'])})" if r["problems"] else ""
        print(f"  {r['name']:{width}}  {r['first_ms']:8.1f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['max_ms']:8.1f} "
              f"{r['repeat']:3}  {target:>7}  {verdict}{problems}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=500)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--raw-repeat", type=int, default=5, help="repetitions of the raw-sample month (slow, no target)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--block-hours", type=int, default=54,
                        help="the largest block Prometheus compacts to (54 h: a Prometheus keeping 30 days)")
    parser.add_argument("--rebuild", action="store_true", help="build the data set again even if it is cached")
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                        / "gpu-portal" / "bench-telemetry")
    args = parser.parse_args()
    if args.days < 2 or args.teams < 2 or args.running < 3:
        parser.error("--days must be at least 2, --teams at least 2, --running at least 3")
    rules = production_rules()
    key = json.dumps({"version": GENERATOR_VERSION, "rules": rules, **parameters(args)}, sort_keys=True)
    cache = args.cache_dir / hashlib.sha256(key.encode()).hexdigest()[:16]
    reused = (cache / "manifest.json").exists() and not args.rebuild
    base = None if reused or args.rebuild else extendable(args.cache_dir, args, rules)
    if reused:
        manifest = json.loads((cache / "manifest.json").read_text())
    elif base:
        manifest = extend(*base, cache, rules)
    else:
        print(f"Building the data set in {cache} ...", file=sys.stderr, flush=True)
        manifest = build(cache, args, rules)
    server = BenchPrometheus(cache / "data", args.block_hours)
    t0 = time.perf_counter()
    server.start(timeout=600)
    try:
        started_s = time.perf_counter() - t0
        load = os.getloadavg()[0], 0.0
        rows = measure(server.url, manifest, args.repeat, args.raw_repeat)
        load = load[0], os.getloadavg()[0]
    finally:
        server.stop()
    report(manifest, rows, reused=reused, cache=cache, load=load)
    print(f"Prometheus answered {started_s:.1f} s after it was started on the data set.")
    result = {"commit": os.popen(f"git -C {ROOT} describe --always --dirty").read().strip(),
              "load_average": [round(x, 1) for x in load], "reused": reused,
              **{k: v for k, v in manifest.items() if k not in ("running", "xid", "rules")}, "rows": rows}
    print(json.dumps(result))
    record("telemetry", result)
    missed = [r["name"] for r in rows if not r["met"]]
    if missed:
        sys.exit(f"Missed or wrong: {'; '.join(missed)}")


if __name__ == "__main__":
    main()
