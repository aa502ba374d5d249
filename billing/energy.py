"""GPU energy per team: each hour's watt-hours from telemetry, metered once the hour is over, and
read back for a team's month, the API and statements, with kg CO₂e where the site gives its
emission factor (`PORTAL_EMISSION_FACTOR_KG_PER_KWH`).

The figure is DCGM's power (`DCGM_FI_DEV_POWER_USAGE`), sampled each minute, each pod given its
part of its card's draw: a card's power split among the series that report it (a time-sliced or
MPS card's pods by the replicas each holds, a MIG GPU's instances, held or not), so no watt counts
twice (`portal.metrics`, `energy_hours`). It is the GPUs' draw only, not the hosts', cooling's or
the network's.

One rule for every surface: watt-hours are stored exactly (three places), summed in the database,
and turned into kWh (`portal.metrics.base.kwh`, which a workload's page uses too) and kg CO₂e once,
rounded half-even to two places; a statement's total is the sum of its rounded team figures, as its
money is.

Metering (`energy_meter`, beat every five minutes) reads the hours after its watermark up to the
last complete one, `MAX_HOURS_PER_RUN` at a time, one metrics query per run; an hour telemetry could
not answer (Prometheus down) is read on a later run, so a gap shorter than Prometheus's retention
loses nothing. Rewriting an hour replaces its rows, so a run twice gives the same rows.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Min, Sum
from django.utils import timezone

from billing import periods
from billing.models import Account, EnergyHour, EnergyState
from jobs.models import RunInterval
from portal.health import ENERGY_METER, heartbeat_record
from portal.metrics import MetricsError, metrics
from portal.metrics.base import kwh
from portal.metrics.off import NoMetrics
from tenants.manifests import team_object_name

log = logging.getLogger(__name__)

MAX_HOURS_PER_RUN = 48
BACKFILL = dt.timedelta(days=31)  # the oldest hour a first run reads: a month, within any retention
TWO_PLACES = Decimal("0.01")


def kg_co2e(watt_hours: Decimal, factor: Decimal | None) -> Decimal | None:
    """kg CO₂e of the exact watt-hours at the site's factor, rounded once as kWh are."""
    if factor is None:
        return None
    return (watt_hours / 1000 * factor).quantize(TWO_PLACES, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True)
class TeamEnergy:
    account_id: int
    slug: str
    name: str
    watt_hours: Decimal
    factor: Decimal | None

    @property
    def kwh(self) -> Decimal:
        return kwh(self.watt_hours)

    @property
    def kg_co2e(self) -> Decimal | None:
        return kg_co2e(self.watt_hours, self.factor)


@dataclass(frozen=True)
class Energy:
    """Teams' GPU energy over a period, as far as it is metered; the totals are the sums of the
    teams' rounded figures."""

    teams: tuple[TeamEnergy, ...]
    through: dt.datetime | None  # metered up to here (exclusive); None: not yet
    factor: Decimal | None
    unavailable: str = ""  # why there is no figure at all

    @property
    def kwh(self) -> Decimal:
        return sum((team.kwh for team in self.teams), Decimal("0.00"))

    @property
    def kg_co2e(self) -> Decimal | None:
        if self.factor is None:
            return None
        return sum((team.kg_co2e or Decimal(0) for team in self.teams), Decimal("0.00"))


def energy_report(*, accounts: Collection[Account] | None = None, start: dt.datetime, end: dt.datetime) -> Energy:
    """The accounts' metered energy in [start, end) (every team's when `accounts` is None): one
    grouped aggregate, one read of the state and, for every team, one of the teams that drew any."""
    factor = settings.PORTAL_EMISSION_FACTOR_KG_PER_KWH
    if isinstance(metrics(), NoMetrics):
        return Energy((), None, factor, "GPU power telemetry is not set up.")
    state = EnergyState.objects.filter(pk=1).first()
    if state is None or state.metered_through is None or state.metered_through <= start:
        why = (f"telemetry could not be read ({state.unavailable})" if state is not None and state.unavailable
               else "energy is read once each hour is over")
        return Energy((), None, factor, f"Not metered yet: {why}.")
    rows = EnergyHour.objects.filter(hour__gte=start, hour__lt=end)
    if accounts is not None:
        rows = rows.filter(account__in=[a.pk for a in accounts])
    totals = {row["account_id"]: row["total"]
              for row in rows.values("account_id").annotate(total=Sum("watt_hours")).order_by()}
    if accounts is None:
        accounts = list(Account.objects.filter(pk__in=list(totals)))
    teams = tuple(TeamEnergy(a.pk, a.slug, a.name, totals[a.pk], factor) for a in sorted(accounts, key=lambda a: a.slug)
                  if totals.get(a.pk))
    return Energy(teams, min(state.metered_through, end), factor)


def month_energy(*, month: dt.date, accounts: Collection[Account] | None = None) -> Energy:
    """The accounts' metered energy in a local month (every team's when `accounts` is None)."""
    start, end = periods.month_bounds(month)
    return energy_report(accounts=accounts, start=start, end=end)


def _first_hour(now: dt.datetime) -> dt.datetime:
    first = RunInterval.objects.aggregate(first=Min("started_at"))["first"]
    oldest = periods.hour_floor(now - BACKFILL)
    return periods.hour_floor(now) if first is None else max(periods.hour_floor(first), oldest)


def _namespaces(accounts: Collection[Account]) -> dict[str, Account]:
    return {team_object_name(prefix=settings.PORTAL_NAMESPACE_PREFIX, slug=account.slug): account for account in accounts}


def energy_meter(*, now: dt.datetime | None = None) -> int:
    """Meters the complete hours after the watermark (up to MAX_HOURS_PER_RUN); returns how many.
    Safe to run twice or at once: the state row is locked and an hour's rows are replaced."""
    now = now or timezone.now()
    door = metrics()
    if isinstance(door, NoMetrics):
        return 0
    with transaction.atomic():
        EnergyState.objects.get_or_create(pk=1)
        state = EnergyState.objects.select_for_update().get(pk=1)
        start = state.metered_through or _first_hour(now)
        last = periods.hour_floor(now)  # the open hour's start: hours before it are complete
        end = min(start + dt.timedelta(hours=MAX_HOURS_PER_RUN), last)
        if end <= start:
            heartbeat_record(name=ENERGY_METER, at=now)
            return 0
        by_namespace = _namespaces(list(Account.objects.all()))
        try:
            found = door.energy_hours(namespaces=list(by_namespace), start=start, end=end)
        except MetricsError as error:
            log.warning("energy: telemetry could not be read for %s to %s: %s", start, end, error)
            state.checked_at, state.unavailable = now, str(error)[:300]
            state.save(update_fields=["checked_at", "unavailable"])
            return 0
        EnergyHour.objects.filter(hour__gte=start, hour__lt=end).delete()
        EnergyHour.objects.bulk_create(
            EnergyHour(account=by_namespace[key.namespace], hour=key.hour,
                       watt_hours=Decimal(repr(watt_hours)).quantize(Decimal("0.001")))
            for key, watt_hours in sorted(found.items()) if key.namespace in by_namespace and key.hour < end)
        state.metered_through, state.checked_at, state.unavailable = end, now, ""
        state.save(update_fields=["metered_through", "checked_at", "unavailable"])
        if end == last:
            heartbeat_record(name=ENERGY_METER, at=now)
    hours = int((end - start).total_seconds() // 3600)
    log.info("energy: metered %d hours to %s", hours, end)
    return hours
