"""The demo's past, seeded as live runs are recorded and metered: the finished runs of the teams'
recurring jobs since the start of the previous month, each a RunInterval with its flavor,
fraction and guaranteed or borrowed state (and a RunIntervalSwitch where that changed), decided
from the quota grants in force at each moment by the rule the sync applies live
(`jobs.sync.borrowing`). `billing.metering.rollups_refresh` makes the rollups from them, so
`manage.py billing_verify` agrees; their GPU energy is seeded by the simulated telemetry's power
model, and finance closes the previous month through `billing.statements.services.statement_close`.

Runs are keyed by pod uid (team, workload, day): seeding again the same day changes nothing; on a
later day it adds the runs finished since, except in a month already closed (a closed statement
never changes, and its month does not gain usage after the fact)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from django.db import transaction
from django.db.models import Max

from billing import metering, periods
from billing.budgets import services as budgets
from billing.models import Account, Budget, EnergyHour, EnergyState, Rate, Statement
from billing.rates.card import RateCard
from billing.statements import services as statements
from jobs.models import RunInterval, RunIntervalSwitch, Workload, WorkloadTemplate
from jobs.sync import borrowing
from portal.metrics import simulated as simulated_metrics
from portal.models import User
from tenants import catalog
from tenants.models import Flavor, QuotaGrant, Team

# List prices per physical GPU-hour; a MIG slice or a time-sliced share pays its fraction. The CPU
# pool's is per unit-hour (4 cores and 16 GiB).
# slug, price per GPU-hour (a CPU unit-hour), percent off borrowed (preemptible) hours
LIST_PRICES = (("h100-80gb", "2.75", "30"), ("a100-1g-10gb", "1.80", "25"), ("t4-shared", "0.35", "20"),
               ("cpu-4c-16g", "0.20", "0"))
DEMO_BUDGET = ("vision", "1500")  # about half a month of its runs: the bar fills and the forecast dates the crossing
HISTORY_ENGINE = 0.875  # the seeded runs' engine active: a training's steady 80-95 % (portal.metrics.simulated)


@dataclass(frozen=True)
class DemoRun:
    """A team's recurring job: from `hour` (billing zone) on the days whose ordinal `every`
    divides, for `hours` plus 0 to 2 by the day and a few minutes, so the charts are not flat."""

    team: str
    workload: str
    owner: str
    flavor: str
    units: int
    hour: int
    hours: int
    every: int = 1


# Beside each team's grants (demo.site): vision's ablation on top of its nightly run needs 10 H100
# of 8 (borrowed, except while the conference push gives 12); nlp's evaluation on top of its
# fine-tune needs 14 of 12; recsys holds no H100 but for the holiday grant, so its backfill
# borrows before and after it, and switches at its first and last midnight.
RUNS = (
    DemoRun("vision", "detector-nightly", "alice", "h100-80gb", 4, hour=20, hours=7),
    DemoRun("vision", "detector-ablation", "bob", "h100-80gb", 6, hour=22, hours=3, every=3),
    DemoRun("vision", "segmenter-sweep", "bob", "t4-shared", 4, hour=9, hours=5),
    DemoRun("nlp", "assistant-finetune", "bob", "h100-80gb", 8, hour=1, hours=9),
    DemoRun("nlp", "assistant-eval", "omar", "h100-80gb", 6, hour=6, hours=3, every=2),
    DemoRun("recsys", "ranker-scoring", "carol", "a100-1g-10gb", 7, hour=6, hours=10),
    DemoRun("recsys", "ranker-eval", "rita", "t4-shared", 2, hour=14, hours=3),
    DemoRun("recsys", "ranker-backfill", "carol", "h100-80gb", 2, hour=22, hours=6),
)


def history_start(now: dt.datetime) -> dt.datetime:
    """The start of the previous month in the billing zone: the history covers it whole, so its
    statement has every day's lines whatever the day of the month."""
    this_month = periods.month_start(periods.local_date(now))
    return periods.month_bounds(this_month - dt.timedelta(days=1))[0]


@dataclass(frozen=True)
class PlannedRun:
    run: DemoRun
    day: dt.date
    start: dt.datetime
    end: dt.datetime

    @property
    def pod_uid(self) -> str:
        return f"demo-{self.run.team}-{self.run.workload}-{self.day:%Y%m%d}"


def planned_runs(*, since: dt.datetime, now: dt.datetime) -> list[PlannedRun]:
    """Every run started since `since` that has ended by now: only those are recorded, so only they
    hold quota when the recorded runs' borrowed state is decided (a run still going would make a
    recorded one borrowed for a guarantee nothing on record took)."""
    planned = []
    day, last = periods.local_date(since), periods.local_date(now)
    while day <= last:
        for run in RUNS:
            if day.toordinal() % run.every:
                continue
            start = periods.local_midnight(day) + dt.timedelta(hours=run.hour)
            end = start + dt.timedelta(hours=run.hours + day.toordinal() % 3, minutes=7 * (day.day % 5))
            if since <= start and end <= now:
                planned.append(PlannedRun(run, day, start, end))
        day += dt.timedelta(days=1)
    return planned


Key = tuple[int, int]  # team id, flavor id


@dataclass(frozen=True)
class Held:
    """Units of a flavor a team's grant guaranteed over [start, end) (end None: still)."""

    key: Key
    units: int
    start: dt.datetime
    end: dt.datetime | None


@dataclass(frozen=True)
class Ran:
    key: Key
    units: int
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class QuotaState:
    """A run's quota over its life: borrowed or not from its start, and each later change."""

    borrowed: bool
    switches: tuple[tuple[dt.datetime, bool], ...] = ()


def quota_states(runs: Sequence[Ran], held: Sequence[Held]) -> list[QuotaState]:
    """Each run's quota as the sync records it live: at every moment something changes (a run
    starts or ends, a grant starts or stops), `jobs.sync.borrowing` decides, oldest run first,
    which runs are beyond their team's guarantee; a run starts in the state the first verdict gives
    it and switches where a later one differs."""
    moments = sorted({run.start for run in runs} | {run.end for run in runs}
                     | {grant.start for grant in held} | {grant.end for grant in held if grant.end is not None})
    order = sorted(range(len(runs)), key=lambda index: (runs[index].start, index))
    current: dict[int, bool] = {}
    first: dict[int, bool] = {}
    switches: dict[int, list[tuple[dt.datetime, bool]]] = defaultdict(list)
    for at in moments:
        running = [index for index in order if runs[index].start <= at < runs[index].end]
        if not running:
            continue
        guarantees: dict[Key, int] = defaultdict(int)
        for grant in held:
            if grant.start <= at and (grant.end is None or at < grant.end):
                guarantees[grant.key] += grant.units
        for index, borrowed in zip(running, borrowing(((runs[i].key, runs[i].units) for i in running), guarantees),
                                   strict=True):
            if index not in current:
                first[index] = borrowed
            elif current[index] != borrowed:
                switches[index].append((at, borrowed))
            current[index] = borrowed
    return [QuotaState(first[index], tuple(switches[index])) for index in range(len(runs))]


def _held(team_ids: Sequence[int]) -> Iterator[Held]:
    """The teams' grants as the rule reads them: in force from valid_from until the earlier of
    valid_until and the portal recording their end, as metering counts guarantees."""
    for team_id, flavor_id, units, valid_from, valid_until, ended_at in QuotaGrant.objects.filter(
            team_id__in=team_ids).values_list("team_id", "flavor_id", "units", "valid_from", "valid_until", "ended_at"):
        stops = [instant for instant in (valid_until, ended_at) if instant is not None]
        yield Held((team_id, flavor_id), units, valid_from, min(stops) if stops else None)


@dataclass(frozen=True)
class Seeded:
    since: dt.datetime
    intervals: int
    statement: Statement | None


@transaction.atomic
def history_seed(*, now: dt.datetime) -> Seeded:
    """List prices in force since the history's start, the finished runs of RUNS since then
    (RunIntervals with their quota states), metered by `billing.metering.rollups_refresh` as the
    beat would, the previous month closed by finance, and vision's budget unless finance has set
    one. Seeds what still fits a demo site someone has changed."""
    since = history_start(now)
    finance = User.objects.filter(username="finance").first()
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.filter(slug__in=[slug for slug, *_ in LIST_PRICES])}
    card = RateCard.read(flavor_ids=[flavor.pk for flavor in flavors.values()])
    for slug, price, discount in LIST_PRICES:
        # rate_set refuses the past, rightly; the demo's history is older than its seeding.
        if slug in flavors and card.rate_at(flavors[slug].pk, since) is None:
            Rate.objects.create(flavor=flavors[slug], price_per_gpu_hour=Decimal(price), currency="USD",
                                borrowed_discount_percent=Decimal(discount), effective_from=since,
                                note="Demo list price", created_by=finance)
    if metering.watermark() is None:
        # Capacity and guarantees are recorded as the watermark passes: from the history's start.
        metering.rollups_refresh(until=since)
    created = _intervals_seed(now=now, since=since, flavors=flavors)
    metering.rollups_refresh()
    _energy_seed(now=now)
    statement = _previous_month_close(now=now, since=since, finance=finance)
    budget_team = Team.objects.filter(slug=DEMO_BUDGET[0]).first()
    if budget_team is not None and finance is not None and not Budget.objects.filter(account__team=budget_team).exists():
        budgets.budget_set(actor=finance, team=budget_team, amount=DEMO_BUDGET[1], currency="USD")
    return Seeded(since=since, intervals=created, statement=statement)


def _intervals_seed(*, now: dt.datetime, since: dt.datetime, flavors: dict[str, Flavor]) -> int:
    teams = {team.slug: team for team in Team.objects.filter(slug__in={run.team for run in RUNS})}
    users = {user.username: user for user in User.objects.filter(username__in={run.owner for run in RUNS})}
    template = WorkloadTemplate.objects.filter(slug="pytorch-training", owner_team__isnull=True).first()
    version = template.versions.order_by("-number").first() if template else None
    if version is None:
        return 0
    planned = [p for p in planned_runs(since=since, now=now)
               if p.run.team in teams and p.run.owner in users and p.run.flavor in flavors]
    states = quota_states([Ran((teams[p.run.team].pk, flavors[p.run.flavor].pk), p.run.units, p.start, p.end)
                           for p in planned], list(_held([team.pk for team in teams.values()])))
    existing = set(RunInterval.objects.filter(pod_uid__in=[p.pod_uid for p in planned]).values_list("pod_uid", flat=True))
    closed_until = Statement.objects.aggregate(end=Max("period_end"))["end"]
    workloads: dict[tuple[str, str], Workload] = {}
    intervals: list[RunInterval] = []
    switches: list[list[tuple[dt.datetime, bool]]] = []
    for run, state in zip(planned, states, strict=True):
        if run.pod_uid in existing or (closed_until is not None and run.start < closed_until):
            continue
        key = (run.run.team, run.run.workload)
        if key not in workloads:
            workloads[key] = Workload.objects.get_or_create(team=teams[run.run.team], name=run.run.workload, defaults={
                "owner": users[run.run.owner], "template_version": version, "flavor": flavors[run.run.flavor],
                "units": run.run.units, "cpu": 8, "memory_gib": 32, "priority": "normal",
                "phase": Workload.Phase.SUCCEEDED, "created_at": since, "submitted_at": since,
                "reason": "Demo history: a run that finished before the portal's demo began."})[0]
        interval = RunInterval(workload=workloads[key], pod_uid=run.pod_uid, pod_name=f"{run.run.workload}-{run.day:%m%d}",
                               node=f"sim-{run.run.flavor}-0", resource_name=flavors[run.run.flavor].resource_name,
                               units=run.run.units, started_at=run.start, ended_at=run.end, borrowed=state.borrowed)
        interval.fill_from_workload()
        intervals.append(interval)
        switches.append(list(state.switches))
    RunInterval.objects.bulk_create(intervals, batch_size=500)
    RunIntervalSwitch.objects.bulk_create([RunIntervalSwitch(interval=interval, at=at, borrowed=borrowed)
                                           for interval, changes in zip(intervals, switches, strict=True)
                                           for at, borrowed in changes], batch_size=500)
    for workload in workloads.values():
        finished = max(i.ended_at for i in intervals if i.workload_id == workload.pk and i.ended_at is not None)
        if workload.finished_at is None or finished > workload.finished_at:
            Workload.objects.filter(pk=workload.pk).update(finished_at=finished)
    return len(intervals)


def _energy_seed(*, now: dt.datetime) -> int:
    """The seeded past's GPU energy, once, as the energy meter would have read it: each run's units
    drawing their share of their card's power at a training's steady engine active, by the model
    the simulated telemetry draws with (portal.metrics.simulated). From the current hour on, the
    meter reads the live simulated pods."""
    if EnergyState.objects.filter(pk=1, metered_through__isnull=False).exists():
        return 0
    until = periods.hour_floor(now)
    share = Decimal(simulated_metrics.IDLE_POWER_SHARE + simulated_metrics.BUSY_POWER_SHARE * HISTORY_ENGINE)
    watt_hours: dict[tuple[int, dt.datetime], Decimal] = defaultdict(Decimal)
    accounts = {account.team_uid: account for account in Account.objects.exclude(team_uid=None)}
    for interval in RunInterval.objects.filter(ended_at__lt=until).select_related("flavor"):
        account = accounts.get(interval.team_uid)
        if account is None or interval.ended_at is None:
            continue
        unit = catalog.unit_limits(gpu_model_name=interval.flavor.gpu_model, resource_name=interval.resource_name,
                                   fraction=Fraction(interval.fraction_numerator, interval.fraction_denominator))
        watts = Decimal(unit.milliwatts) / 1000 * share * interval.units
        for hour, seconds in periods.split_by_hour(interval.started_at, interval.ended_at):
            watt_hours[(account.pk, hour)] += watts * seconds / 3600
    EnergyHour.objects.bulk_create([EnergyHour(account_id=account, hour=hour, watt_hours=value.quantize(Decimal("0.001")))
                                    for (account, hour), value in sorted(watt_hours.items())], batch_size=500)
    EnergyState.objects.update_or_create(pk=1, defaults={"metered_through": until, "checked_at": now})
    return len(watt_hours)


def _previous_month_close(*, now: dt.datetime, since: dt.datetime, finance: User | None) -> Statement | None:
    """Finance closes the month the history began in, once, so the statements page has a sealed
    statement with lines on any day of the month."""
    month = periods.local_date(since)
    if finance is None or Statement.objects.filter(month=month).exists():
        return None
    return statements.statement_close(actor=finance, month=month, now=now)
