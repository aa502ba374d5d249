"""The door to a real Prometheus, over its HTTP API (`/api/v1/query`, `/api/v1/query_range`).

Queries go as POST forms (a sweep's namespace list can be long), with a timeout on the client
and the server side, and a bounded number of retries with jitter for what may pass (connection
errors, 429, 5xx); a refused query (4xx: bad PromQL, too many points) is said in words at once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any
from urllib.parse import urlencode

import urllib3
from django.conf import settings

from portal.backoff import backoff_delay
from portal.metrics.base import (
    ENERGY_SAMPLE_SECONDS,
    ENGINE_ACTIVE,
    FB_FREE,
    FB_USED,
    POWER,
    TEMPERATURE,
    XID,
    DeviceHours,
    EnergyKey,
    GpuReading,
    MetricsError,
    PodActivity,
    PodKey,
    PodSpan,
    Point,
    WorkloadSeries,
    XidReport,
    range_step,
)

log = logging.getLogger(__name__)

RETRIABLE_STATUS = {429, 500, 502, 503, 504}
TOO_MANY_SAMPLES = "would load too many samples into memory"
# The recording rules deploy/prometheus/ defines; a window they cover is read from them.
RECORDED_WINDOWS = {
    300: "namespace_pod:dcgm_gr_engine_active:avg5m",
    3600: "namespace_pod:dcgm_gr_engine_active:avg1h",
}
# Per namespace and hour: the devices its pods reported in the hour (a shared one at each pod's
# share) and their busy time (recorded from the per-pod namespace_pod:dcgm_gpus:count1h and the
# per-series shares; a month is one series per team).
RECORDED_NAMESPACE_GPUS_1H = "namespace:dcgm_gpus:count1h"
RECORDED_NAMESPACE_BUSY_1H = "namespace:dcgm_gpus_busy:sum1h"
# Per pod series: its part of its card's power, and the pods on its device.
RECORDED_POWER_SHARE = "namespace_pod_gpu:dcgm_power_share:ratio"
RECORDED_DEVICE_PODS = "namespace_pod_gpu:dcgm_device_pods:count"
# Per pod, every CHART_RECORD_SECONDS: the workload page's figures, read where its chart has a
# point that often or less (the 5-minute and hourly engine averages above serve for engine active),
# so a month reads a series per pod, not one per GPU.
CHART_RECORD_SECONDS = 300
RECORDED_POD_SERIES = {
    "memory_used": "namespace_pod:dcgm_fb_used_mib:sum",
    "memory_total": "namespace_pod:dcgm_fb_total_mib:sum",
    "power": "namespace_pod:dcgm_power_usage_watts:share",
    "temperature": "namespace_pod:dcgm_gpu_temp_celsius:max",
    "sharers": "namespace_pod:dcgm_device_pods:max",
}
SERIES_NAMES = ("engine_active", *RECORDED_POD_SERIES)
# One device: a GPU or MIG instance of a node. A shared one (time-sliced, MPS) is reported once per
# pod on it, or once per replica a pod holds (dcgm-exporter's `vgpu` label), each with the whole
# device's values; deploy/prometheus/recording_rules.yaml divides it the same way.
DEVICE = "Hostname, gpu, UUID, GPU_I_ID"
GPU = "Hostname, gpu, UUID"  # the physical card, whose power every series of it reports


def _device_share(selector: str) -> str:
    """Each series' share of its device now: 1 / the pod series on it (1 on an unshared device)."""
    return (f"(({ENGINE_ACTIVE}{selector} >= bool 0) / on ({DEVICE}) group_left "
            f'count by ({DEVICE}) ({ENGINE_ACTIVE}{{pod!=""}}))')


def _power_share(selector: str, *, recorded: bool) -> str:
    """Each series' part of its card's power: the card's draw split equally among the series that
    report it (its MIG instances, held or not, or the pods and replicas on a shared card), so no
    watt is counted twice. Recorded, it reads only the selected series; raw, every card's."""
    if recorded:
        return f"({POWER}{selector} * {RECORDED_POWER_SHARE}{selector})"
    return f"({POWER}{selector} / on ({GPU}) group_left count by ({GPU}) ({POWER}))"


def _regex_of(names: Collection[str]) -> str:
    """A PromQL regex matching exactly these names (Kubernetes names: escaped all the same)."""
    return "|".join(re.escape(name).replace("\\", "\\\\") for name in sorted(set(names)))


def _seconds(window: dt.timedelta) -> int:
    return max(int(window.total_seconds()), 1)


class PrometheusMetrics:
    def __init__(
        self,
        url: str,
        *,
        token: str = "",
        ca_file: str = "",
        timeout: float = 10,
        max_attempts: int = 3,
        use_recording_rules: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.use_recording_rules = use_recording_rules
        self.sleep = sleep
        self.pool = urllib3.PoolManager(maxsize=8, ca_certs=ca_file or None, retries=False)

    @classmethod
    def from_settings(cls) -> PrometheusMetrics:
        token = settings.PROMETHEUS_TOKEN
        if not token and settings.PROMETHEUS_TOKEN_FILE:
            with open(settings.PROMETHEUS_TOKEN_FILE) as handle:
                token = handle.read().strip()
        return cls(settings.PROMETHEUS_URL, token=token, ca_file=settings.PROMETHEUS_CA_FILE,
                   timeout=settings.PROMETHEUS_TIMEOUT, use_recording_rules=settings.PROMETHEUS_RECORDING_RULES)

    # --- The domain questions ------------------------------------------------------------------

    def engine_active(self, *, namespaces: Collection[str], window: dt.timedelta) -> PodActivity:
        if not namespaces:
            return PodActivity(window=window)
        selector = f'{{namespace=~"{_regex_of(namespaces)}"}}'
        seconds = _seconds(window)
        recorded = RECORDED_WINDOWS.get(seconds) if self.use_recording_rules else None
        average = (f"{recorded}{selector}" if recorded
                   else f"avg by (namespace, pod) (avg_over_time({ENGINE_ACTIVE}{selector}[{seconds}s]))")
        # Only pods reporting now: a stopped exporter leaves old samples in the window, and
        # judging a pod on those would stop it for the exporter's outage.
        query = f"100 * {average} and on (namespace, pod) group by (namespace, pod) ({ENGINE_ACTIVE}{selector})"
        result = self.query(query)
        by_pod = {PodKey(r["metric"].get("namespace", ""), r["metric"].get("pod", "")): float(r["value"][1]) for r in result}
        return PodActivity(window=window, by_pod=by_pod)

    def workload_series(self, *, namespace: str, pods: Sequence[PodSpan], start: dt.datetime, end: dt.datetime) -> WorkloadSeries:
        step = range_step(start, end)
        if not pods:
            return WorkloadSeries(step_seconds=step)
        sel = f'{{namespace="{namespace}",pod=~"{_regex_of([p.name for p in pods])}"}}'
        # Each pod's figures, then the workload's: engine active averaged over a pod's GPUs and then
        # its pods; memory summed over each pod's devices (a device reported once per replica it
        # holds counts once); power its part of each card's; the hottest GPU; sharers, the most pods
        # on one of its devices.
        if self.use_recording_rules and step >= CHART_RECORD_SECONDS:
            # Each pod's last record in the 10 minutes before each step, as an instant read looks
            # back 5 minutes (a series recorded every 5 minutes may be just over 5 minutes old): not
            # the whole step, where a pod that ended in it would add to the one restarted after it.
            last = {name: f"last_over_time({recorded}{sel}[{2 * CHART_RECORD_SECONDS}s])"
                    for name, recorded in RECORDED_POD_SERIES.items()}
            engine = (f"{RECORDED_WINDOWS[step]}{sel}" if step in RECORDED_WINDOWS
                      else f"avg_over_time({RECORDED_WINDOWS[CHART_RECORD_SECONDS]}{sel}[{step}s])")
            parts = {
                "engine_active": f"100 * avg({engine})",
                "memory_used": f"sum({last['memory_used']})",
                "memory_total": f"sum({last['memory_total']})",
                "power": f"sum({last['power']})",
                "temperature": f"max({last['temperature']})",
                "sharers": f"max({last['sharers']})",
            }
        else:
            each_device = f"pod, {DEVICE}"
            parts = {
                "engine_active": f"100 * avg(avg by (pod) (avg_over_time({ENGINE_ACTIVE}{sel}[{max(step, 60)}s])))",
                "memory_used": f"sum(max by ({each_device}) ({FB_USED}{sel}))",
                "memory_total": f"sum(max by ({each_device}) ({FB_USED}{sel} + {FB_FREE}{sel}))",
                "power": f"sum({_power_share(sel, recorded=self.use_recording_rules)})",
                "temperature": f"max({TEMPERATURE}{sel})",
                "sharers": (f"max({RECORDED_DEVICE_PODS}{sel})" if self.use_recording_rules else
                            f'max(count by ({DEVICE}) (group by ({DEVICE}, namespace, pod) ({ENGINE_ACTIVE}{{pod!=""}})) '
                            f"and on ({DEVICE}) {ENGINE_ACTIVE}{sel})"),
            }
        query = " or ".join(f'label_replace({expr}, "series", "{name}", "", "")' for name, expr in parts.items())
        found: dict[str, tuple[Point, ...]] = dict.fromkeys(SERIES_NAMES, ())
        for series in self.query_range(query, start=start, end=end, step=step):
            name = series["metric"].get("series", "")
            if name in found:
                found[name] = tuple(Point(float(at), float(value)) for at, value in series["values"])
        return WorkloadSeries(step_seconds=step, engine_active=found["engine_active"], memory_used_mib=found["memory_used"],
                              memory_total_mib=found["memory_total"], power_watts=found["power"],
                              temperature_c=found["temperature"], sharers=found["sharers"])

    def xid_errors(self, *, namespaces: Collection[str], window: dt.timedelta) -> list[XidReport]:
        if not namespaces:
            return []
        sel = f'{{namespace=~"{_regex_of(namespaces)}"}}'
        query = f"({XID}{sel} != 0) and (changes({XID}{sel}[{_seconds(window)}s]) > 0)"
        reports = []
        for r in self.query(query):
            labels = r["metric"]
            reports.append(XidReport(
                namespace=labels.get("namespace", ""), pod=labels.get("pod", ""),
                gpu=labels.get("UUID") or labels.get("gpu", ""), node=labels.get("Hostname", ""),
                code=int(float(r["value"][1])), mig_instance=labels.get("GPU_I_ID", "")))
        return sorted(reports, key=lambda x: (x.namespace, x.pod, x.gpu))

    def device_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceHours]:
        span = int((end - start).total_seconds())
        if not namespaces or span < 60:
            return {}
        sel = f'{{namespace=~"{_regex_of(namespaces)}"}}'
        seconds = 3600 if span >= 6 * 3600 else 60  # each step's value covers the `seconds` before it
        if seconds == 3600 and self.use_recording_rules:
            # Each hour: the devices the namespace's pods reported in it (a pod that ran 14:05-14:45
            # too), and those times each pod's average over the hour; recorded per namespace, so a
            # month reads one series per team however many pods it ran.
            busy = f"sum by (namespace) ({RECORDED_NAMESPACE_BUSY_1H}{sel})"
            covered = f"sum by (namespace) ({RECORDED_NAMESPACE_GPUS_1H}{sel})"
            scale = ""
        else:
            # As the recording rules do: each series at its share of its device, averaged over the step.
            share = f"avg_over_time({_device_share(sel)}[{seconds}s:60s])"
            busy = f"sum by (namespace) (avg_over_time({ENGINE_ACTIVE}{sel}[{seconds}s]) * {share})"
            covered = f"sum by (namespace) ({share})"
            scale = f" * {seconds} / 3600"
        # The steps in (start, end]: half a step short of the span, as a step at `start` would count
        # the hour before it, and Prometheus 2 takes both ends of a range where 3 leaves out the first.
        window, step = f"{span - seconds // 2}s", f"{seconds}s"
        query = " or ".join(
            f'label_replace(sum by (namespace) (sum_over_time(({expr})[{window}:{step}])){scale}, "stat", "{stat}", "", "")'
            for stat, expr in (("busy", busy), ("covered", covered)))
        found: dict[str, dict[str, float]] = {}
        for r in self.query(query, at=end):
            found.setdefault(r["metric"].get("namespace", ""), {})[r["metric"].get("stat", "")] = float(r["value"][1])
        return {namespace: DeviceHours(busy=stats.get("busy", 0.0), covered=stats["covered"])
                for namespace, stats in found.items() if stats.get("covered")}

    def energy_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[EnergyKey, float]:
        if not namespaces or end <= start:
            return {}
        sel = f'{{namespace=~"{_regex_of(namespaces)}"}}'
        minute = ENERGY_SAMPLE_SECONDS
        # At each hour's end: its minutes (a window half a minute short of the hour, so that the
        # minute at its start, the previous hour's last, is not taken), each sample a minute of draw.
        per_minute = f"sum by (namespace) ({_power_share(sel, recorded=self.use_recording_rules)})"
        query = f"sum_over_time(({per_minute})[{3600 - minute // 2}s:{minute}s]) * {minute} / 3600"
        found: dict[EnergyKey, float] = {}
        for series in self.query_range(query, start=start + dt.timedelta(hours=1), end=end, step=3600):
            namespace = series["metric"].get("namespace", "")
            for at, value in series["values"]:
                watt_hours = float(value)
                if watt_hours > 0:
                    hour = dt.datetime.fromtimestamp(float(at), dt.UTC) - dt.timedelta(hours=1)
                    found[EnergyKey(namespace, hour)] = watt_hours
        return found

    def gpu_readings(self, *, window: dt.timedelta) -> list[GpuReading]:
        query = (f'label_replace(100 * avg_over_time({ENGINE_ACTIVE}[{_seconds(window)}s]), "stat", "engine", "", "") '
                 f'or label_replace({TEMPERATURE}, "stat", "temperature", "", "")')
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for r in self.query(query):
            labels = r["metric"]
            key = (labels.get("Hostname", ""), labels.get("UUID") or labels.get("gpu", ""), labels.get("GPU_I_ID", ""))
            entry = found.setdefault(key, {"namespace": labels.get("namespace", ""), "pod": labels.get("pod", "")})
            entry[labels.get("stat", "")] = float(r["value"][1])
        return sorted((GpuReading(node=node, gpu=gpu, mig_instance=mig, namespace=v["namespace"], pod=v["pod"],
                                  engine_active=v.get("engine"), temperature_c=v.get("temperature"))
                       for (node, gpu, mig), v in found.items()), key=lambda g: (g.node, g.gpu, g.mig_instance))

    # --- The HTTP API --------------------------------------------------------------------------

    def query(self, promql: str, *, at: dt.datetime | None = None) -> list[dict[str, Any]]:
        fields = {"query": promql, "timeout": f"{self.timeout}s"}
        if at is not None:
            fields["time"] = f"{at.timestamp():.3f}"
        return self._call("/api/v1/query", fields)

    def query_range(self, promql: str, *, start: dt.datetime, end: dt.datetime, step: int) -> list[dict[str, Any]]:
        fields = {"query": promql, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                  "step": str(step), "timeout": f"{self.timeout}s"}
        return self._call("/api/v1/query_range", fields)

    def _call(self, path: str, fields: dict[str, str]) -> list[dict[str, Any]]:
        attempt = 0
        while True:
            attempt += 1
            outcome = self._once(path, fields)
            if not isinstance(outcome, MetricsError):
                return outcome
            error = outcome
            if not error.retriable or attempt >= self.max_attempts:
                raise error
            delay = backoff_delay(attempt - 1, base=0.2, most=2.0)
            log.warning("Prometheus query failed (%s); attempt %d of %d in %.1fs", error, attempt + 1, self.max_attempts, delay)
            self.sleep(delay)

    def _once(self, path: str, fields: dict[str, str]) -> list[dict[str, Any]] | MetricsError:
        """One request: the result, or the error to retry or raise."""
        try:
            response = self.pool.urlopen(
                "POST", self.url + path, body=urlencode(fields),
                headers={**self.headers, "Content-Type": "application/x-www-form-urlencoded"},
                timeout=urllib3.Timeout(connect=min(self.timeout, 3), read=self.timeout + 2))
        except urllib3.exceptions.HTTPError as exc:
            return MetricsError(f"Prometheus at {self.url} could not be reached: {_reason(exc)}")
        try:
            body = json.loads(response.data)
        except ValueError:
            body = None
        if response.status in (401, 403):
            return MetricsError(f"Prometheus at {self.url} refused the portal's credentials (HTTP {response.status})",
                                retriable=False)
        if not isinstance(body, dict) or "status" not in body:
            text = response.data[:200].decode(errors="replace").strip()
            return MetricsError(f"Prometheus at {self.url} did not answer with its API (HTTP {response.status}: {text!r})",
                                retriable=response.status in RETRIABLE_STATUS)
        if body["status"] != "success":
            kind, why = body.get("errorType", ""), body.get("error", "no reason given")
            if TOO_MANY_SAMPLES in why:
                # A month of raw series at hundreds of GPUs is over Prometheus's default limit.
                advice = "" if self.use_recording_rules else (
                    "; the portal's recording rules (deploy/prometheus, PROMETHEUS_RECORDING_RULES) answer it from far fewer")
                return MetricsError("Prometheus refused the query: it would load more samples than it allows in one query "
                                    f"(its --query.max-samples){advice}", retriable=False)
            retriable = response.status in RETRIABLE_STATUS or kind in ("timeout", "canceled", "unavailable")
            return MetricsError(f"Prometheus refused the query ({kind}): {why}", retriable=retriable)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)
