"""What the status sync records about workloads, exported on /metrics when Prometheus scrapes.

The sync runs in its own process, so these are read from the database at scrape time (see
portal.observability.scrape_collector_register): the workloads each team has in each phase, the
GPU units its admitted and running workloads hold, and how long workloads wait for admission.
Labels are the team (and its namespace, which dcgm-exporter's series carry) and the flavor:
bounded by the catalog, never by workload.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError
from django.db.models import Count, F, Q, Sum
from django.utils import timezone
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from jobs.models import Workload, WorkloadTransition
from tenants.models import Team

logger = logging.getLogger(__name__)

WAITING_PHASES = frozenset({Workload.Phase.SUBMITTING, Workload.Phase.QUEUED, Workload.Phase.PREEMPTED})
ADMITTED_PHASES = frozenset({Workload.Phase.ADMITTED, Workload.Phase.RUNNING})
HOLDING_PHASES = (Workload.Phase.ADMITTED, Workload.Phase.RUNNING)
# The waits the queue-wait distribution covers: those still going on, and those that ended in an
# admission within this window. A histogram observed only at admission would never show a queue
# where nothing is admitted at all, which is when the alert matters most.
QUEUE_WAIT_WINDOW = timedelta(hours=1)
QUEUE_WAIT_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)


@dataclass(frozen=True)
class Step:
    workload_id: int
    phase: str
    at: datetime


def queue_waits(steps: Iterable[Step], *, now: datetime, since: datetime) -> dict[int, float]:
    """Seconds each workload waited for admission: its wait still going on (so far), or the last
    one that ended in an admission at or after `since`. A wait starts when the workload enters a
    waiting phase (recorded, queued, preempted) from any other, and ends when it is admitted; one
    that ended otherwise (stopped while queued) is no wait for a queue to be judged by."""
    by_workload: dict[int, list[Step]] = defaultdict(list)
    for step in steps:
        by_workload[step.workload_id].append(step)
    waits: dict[int, float] = {}
    for workload_id, history in by_workload.items():
        waiting_since: datetime | None = None
        last: float | None = None
        for step in sorted(history, key=lambda s: s.at):
            if step.phase in WAITING_PHASES:
                waiting_since = waiting_since or step.at
            elif step.phase in ADMITTED_PHASES and waiting_since is not None:
                if step.at >= since:
                    last = (step.at - waiting_since).total_seconds()
                waiting_since = None
            else:
                waiting_since = None
        if waiting_since is not None:
            last = (now - waiting_since).total_seconds()
        if last is not None:
            waits[workload_id] = max(last, 0.0)
    return waits


def wait_buckets(waits: Iterable[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative buckets (le, count) and the sum, as Prometheus histograms have them."""
    values = sorted(waits)
    buckets = [(floatToGoString(bound), float(sum(1 for v in values if v <= bound))) for bound in QUEUE_WAIT_BUCKETS]
    buckets.append(("+Inf", float(len(values))))
    return buckets, float(sum(values))


class WorkloadCollector:
    """Three queries per scrape, whatever the number of workloads."""

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        workloads, units, waiting = self._families()
        try:
            self._fill(workloads, units, waiting, now=timezone.now())
        except DatabaseError:
            logger.warning("workload metrics not exported: the database did not answer", exc_info=True)
            return
        yield from (workloads, units, waiting)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeHistogramMetricFamily]:
        labels = ["team", "namespace", "flavor"]
        return (
            GaugeMetricFamily("portal_workloads", "Active workloads, by team, flavor and phase.",
                              labels=[*labels, "phase"]),
            GaugeMetricFamily("portal_gpu_units_held",
                              "GPU units (whole GPUs, MIG slices or shares, as the flavor counts them) that "
                              "admitted and running workloads hold, by team and flavor.", labels=labels),
            GaugeHistogramMetricFamily(
                "portal_workload_queue_wait_seconds",
                "How long workloads waited for admission: those waiting now (so far) and those admitted "
                "within the last hour, by team and flavor.", labels=labels),
        )

    def _fill(self, workloads: GaugeMetricFamily, units: GaugeMetricFamily,
              waiting: GaugeHistogramMetricFamily, *, now: datetime) -> None:
        active = (Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES)
                  .values("team__slug", "flavor__slug", "phase")
                  .annotate(count=Count("id"),
                            units=Sum(F("units") * F("workers"), filter=Q(phase__in=HOLDING_PHASES))))
        held: dict[tuple[str, str, str], float] = defaultdict(float)
        for row in active:
            key = (row["team__slug"], _namespace(row["team__slug"]), row["flavor__slug"])
            workloads.add_metric([*key, row["phase"]], float(row["count"]))
            if row["units"]:
                held[key] += float(row["units"])
        for key, value in sorted(held.items()):
            units.add_metric(list(key), value)

        since = now - QUEUE_WAIT_WINDOW
        candidates = Workload.objects.filter(
            Q(phase__in=WAITING_PHASES) | Q(transitions__phase__in=ADMITTED_PHASES, transitions__at__gte=since)
        ).values("id")
        steps = [Step(*row) for row in WorkloadTransition.objects.filter(workload_id__in=candidates)
                 .order_by().values_list("workload_id", "phase", "at")]
        waits = queue_waits(steps, now=now, since=since)
        where = {row[0]: row[1:] for row in Workload.objects.filter(id__in=list(waits))
                 .values_list("id", "team__slug", "flavor__slug")}
        grouped: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for workload_id, seconds in waits.items():
            slug, flavor = where[workload_id]
            grouped[(slug, _namespace(slug), flavor)].append(seconds)
        for key, values in sorted(grouped.items()):
            buckets, total = wait_buckets(values)
            waiting.add_metric(list(key), buckets, gsum_value=total)


def _namespace(slug: str) -> str:
    """A team's namespace follows from its slug (Team.namespace): no query for it."""
    return Team(slug=slug).namespace
