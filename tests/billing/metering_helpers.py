"""Small builders for the metering tests: workloads and their pods' run intervals, made directly."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from billing.models import Account, UsageHour
from jobs.models import RunInterval, Workload, WorkloadKind, WorkloadTemplate, WorkloadTemplateVersion
from tenants.models import Flavor, Team

_uids = itertools.count(1)
UTC = dt.UTC


def at(text: str, zone: Any = UTC) -> dt.datetime:
    """An instant written as 'YYYY-MM-DD HH:MM[:SS]' on the given zone's clock (UTC by default)."""
    fmt = "%Y-%m-%d %H:%M:%S" if text.count(":") == 2 else "%Y-%m-%d %H:%M"
    return dt.datetime.strptime(text, fmt).replace(tzinfo=zone)


def make_workload(*, team: Team, owner: Any, flavor: Flavor, units: int = 1, name: str = "train",
                  on_borrowed: bool = False, workers: int = 1) -> Workload:
    template, _ = WorkloadTemplate.objects.get_or_create(slug="metering-train", defaults={
        "name": "Metering training", "kind": WorkloadKind.TRAINING})
    version = template.versions.first() or WorkloadTemplateVersion.objects.create(template=template, number=1,
                                                                                 image="train:1")
    return Workload.objects.create(team=team, owner=owner, template_version=version, name=name, flavor=flavor,
                                   units=units, workers=workers, cpu=1, memory_gib=1, priority="normal",
                                   phase=Workload.Phase.RUNNING, on_borrowed=on_borrowed)


def make_interval(workload: Workload, start: dt.datetime, end: dt.datetime | None = None, *, units: int | None = None,
                  uid: str | None = None) -> RunInterval:
    uid = uid or f"pod-{next(_uids)}"
    return RunInterval.objects.create(workload=workload, pod_uid=uid, pod_name=f"{workload.k8s_name}-{uid}",
                                      node="node-1", resource_name=workload.flavor.resource_name,
                                      units=workload.units if units is None else units, started_at=start, ended_at=end)


def usage(**filters: Any) -> dict[dt.datetime, int]:
    """Unit-seconds per hour of the stored rollups matching the filters."""
    totals: dict[dt.datetime, int] = {}
    for row in UsageHour.objects.filter(**filters).order_by("hour"):
        totals[row.hour] = totals.get(row.hour, 0) + row.unit_seconds
    return totals


def total(**filters: Any) -> int:
    return sum(usage(**filters).values())


def account(team: Team) -> Account:
    return Account.objects.get(team_uid=team.uid)
