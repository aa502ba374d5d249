"""From scratch: run intervals into UsageHour rows, the catalog into CapacityHour rows, quota
grants into GuaranteeHour rows and departments' pools into unit-seconds pooled per hour, for whole
local hours (see billing.metering for how a second is counted). Pure given what it reads; nothing
here writes."""

from __future__ import annotations

import datetime as dt
import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, F, Func, Q, QuerySet
from django.utils import timezone

from billing.models import Account
from billing.periods import hour_floor, hour_starts, next_hour
from billing.rates.card import RateCard
from jobs.models import RunInterval, RunIntervalSwitch
from tenants.models import DepartmentPool, Flavor, QuotaGrant, Team

UsageKey = tuple[dt.datetime, int, int, int | None, str, bool, int | None, int, int]
GuaranteeKey = tuple[dt.datetime, int, int]  # hour, account id, flavor id
PoolKey = tuple[dt.datetime, int]  # hour, flavor id
LentUsage = tuple[dt.datetime, int, int, bool, int]  # hour, account id, flavor id, borrowed, unit-seconds


def second(instant: dt.datetime) -> dt.datetime:
    return instant.replace(microsecond=0)


def ceil_hour(instant: dt.datetime) -> dt.datetime:
    floor = hour_floor(instant)
    return floor if floor == instant else next_hour(floor)


@dataclass(frozen=True)
class Window:
    """Whole local hours from `start` (an hour boundary), counted up to `end` (≤ the next boundary
    after the last hour)."""

    start: dt.datetime
    end: dt.datetime

    def hours(self) -> list[dt.datetime]:
        return list(hour_starts(self.start, self.end))


def epoch(instant: dt.datetime) -> int:
    """Whole seconds since the epoch, truncated: the unit every cut is made in."""
    return int(instant.timestamp())


class _Splitter:
    """Cuts intervals into (hour, borrowed, rate) pieces inside one window; pure given its inputs.
    Works on whole epoch seconds: every instant is truncated to its second before it is compared."""

    def __init__(self, window: Window, card: RateCard) -> None:
        self.hours = window.hours()
        self.bounds = [epoch(hour) for hour in self.hours]
        self.start, self.end = epoch(window.start), epoch(window.end)
        self.card = card

    def _rate_at(self, flavor_id: int, instant: int) -> int | None:
        rate = self.card.rate_at_second(flavor_id, instant)
        return rate.pk if rate is not None else None

    def pieces(self, *, flavor_id: int, start: int, end: int, borrowed: bool,
               switches: list[tuple[int, bool]]) -> Iterator[tuple[int, bool, int | None, int]]:
        """(hour index, borrowed, rate id, seconds) for the part of [start, end) inside the window."""
        lower, upper = max(start, self.start), min(end, self.end)
        if upper <= lower:
            return
        bounds = self.bounds
        index = bisect_right(bounds, lower) - 1
        changes = self.card.change_seconds(flavor_id)
        next_bound = bounds[index + 1] if index + 1 < len(bounds) else upper
        if not switches and upper <= next_bound and not any(lower < at < upper for at in changes):
            yield index, borrowed, self._rate_at(flavor_id, lower), upper - lower  # the common case: one piece
            return
        state = borrowed
        cuts: set[int] = set()
        for at, value in switches:
            if at <= lower:
                state = value
            elif at < upper:
                cuts.add(at)
        states = dict(switches)
        cuts.update(at for at in changes if lower < at < upper)
        cuts.update(bound for bound in bounds[index + 1:] if bound < upper)
        here = lower
        for cut in [*sorted(cuts), upper]:
            while index + 1 < len(bounds) and bounds[index + 1] <= here:
                index += 1
            yield index, state, self._rate_at(flavor_id, here), cut - here
            state = states.get(cut, state)
            here = cut


class Accounts:
    """Account ids by team uid; an interval of a team with no account yet gets one."""

    def __init__(self) -> None:
        self.ids: dict[uuid.UUID, int] = dict(
            Account.objects.filter(team_uid__isnull=False).values_list("team_uid", "id"))  # type: ignore[arg-type]

    def __getitem__(self, team_uid: uuid.UUID) -> int:
        account_id = self.ids.get(team_uid)
        if account_id is None:
            account_id = self.ids[team_uid] = _account_for_uid(team_uid).pk
        return account_id

    def team_uids(self, account_ids: Collection[int]) -> list[uuid.UUID]:
        """Every team uid known so far whose intervals land on these accounts."""
        return [team_uid for team_uid, account_id in self.ids.items() if account_id in account_ids]


def _account_for_uid(team_uid: uuid.UUID) -> Account:
    team = Team.objects.filter(uid=team_uid).first()
    if team is not None:
        return Account.for_team(team)
    # Accounts are made with their team, so this is an interval older than that rule.
    account, _ = Account.objects.get_or_create(team_uid=team_uid, defaults={
        "slug": f"team-{str(team_uid)[:8]}", "name": "A deleted team", "team_deleted_at": timezone.now()})
    return account


def overlaps(window: Window) -> Q:
    return Q(started_at__lt=window.end) & (Q(ended_at__isnull=True) | Q(ended_at__gt=window.start))


def _epoch_column(name: str) -> Func:
    return Func(F(name), template="FLOOR(EXTRACT(EPOCH FROM %(expressions)s))::bigint", output_field=BigIntegerField())


def _seconds_of(values: Iterable[tuple[Any, ...]], positions: tuple[int, ...]) -> Iterator[tuple[Any, ...]]:
    """Rows with the datetimes at `positions` as epoch seconds (PostgreSQL already sends them so)."""
    if connection.vendor == "postgresql":
        yield from values
        return
    for row in values:
        converted = list(row)
        for position in positions:
            if converted[position] is not None:
                converted[position] = epoch(converted[position])
        yield tuple(converted)


def _instants(queryset: QuerySet[Any], fields: tuple[str, ...], instants: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """values_list of the fields, the `instants` among them as epoch seconds."""
    if connection.vendor == "postgresql":
        annotated = queryset.annotate(**{f"{name}_s": _epoch_column(name) for name in instants})
        return iter(annotated.values_list(*[f"{name}_s" if name in instants else name for name in fields]))
    return _seconds_of(queryset.values_list(*fields), tuple(fields.index(name) for name in instants))


def hourly(queryset: QuerySet[Any], fields: tuple[str, ...], window: Window) -> Iterator[tuple[Any, ...]]:
    """values_list of the fields of rollup rows of the window's hours, "hour" among them given as the
    window's own hour instants: the database sends epoch seconds, so the thousands of rows a
    refresh reads back cost no datetime parsing."""
    hours = {epoch(hour): hour for hour in window.hours()}
    position = fields.index("hour")
    for row in _instants(queryset, fields, ("hour",)):
        found = list(row)
        found[position] = hours.get(row[position]) or dt.datetime.fromtimestamp(row[position], dt.UTC)
        yield tuple(found)


def usage_rows(window: Window, *, until: dt.datetime, card: RateCard | None = None,
               accounts: Accounts | None = None, team_uids: Collection[uuid.UUID] | None = None) -> dict[UsageKey, int]:
    """From scratch: the UsageHour rows of the window's hours, open intervals counted up to `until`;
    only the rows of the accounts of `team_uids` when given (a row holds one account's intervals)."""
    window = Window(window.start, min(window.end, until))
    if window.end <= window.start:
        return {}
    splitter = _Splitter(window, card or RateCard.read())
    accounts = accounts or Accounts()
    overlapping = RunInterval.objects.filter(overlaps(window))
    if team_uids is not None:
        overlapping = overlapping.filter(team_uid__in=list(team_uids))
    switches: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for interval_id, at, borrowed in _instants(RunIntervalSwitch.objects.filter(
            interval__in=overlapping).order_by("at", "id"), ("interval_id", "at", "borrowed"), ("at",)):
        switches[interval_id].append((at, borrowed))
    sums: dict[tuple[int, int, int, int | None, str, bool, int | None, int, int], int] = defaultdict(int)
    cut_off = epoch(until)
    intervals = _instants(overlapping, (
        "id", "team_uid", "flavor_id", "owner_key", "owner_username", "borrowed", "fraction_numerator",
        "fraction_denominator", "units", "started_at", "ended_at"), ("started_at", "ended_at"))
    no_switches: list[tuple[int, bool]] = []
    for (interval_id, team_uid, flavor_id, owner_key, owner, borrowed, numerator, denominator, units, started,
         ended) in intervals:
        if units <= 0:
            continue
        end = cut_off if ended is None else min(ended, cut_off)
        account_id = accounts[team_uid]
        for hour, state, rate_id, seconds in splitter.pieces(
                flavor_id=flavor_id, start=started, end=end, borrowed=borrowed,
                switches=switches.get(interval_id, no_switches)):
            sums[(hour, account_id, flavor_id, owner_key, owner, state, rate_id, numerator, denominator)] += units * seconds
    hours = splitter.hours
    return {(hours[key[0]], *key[1:]): value for key, value in sums.items() if value}


def capacity_rows(window: Window, *, until: dt.datetime) -> dict[tuple[dt.datetime, int], tuple[int, int, int]]:
    """(hour, flavor id) → (unit-seconds, fraction numerator, denominator) of the active flavors'
    capacity today, for the window's hours up to `until`."""
    rows: dict[tuple[dt.datetime, int], tuple[int, int, int]] = {}
    end = min(window.end, until)
    flavors = list(Flavor.objects.filter(is_active=True, capacity_units__gt=0).values_list(
        "id", "capacity_units", "fraction_numerator", "fraction_denominator"))
    for hour in hour_starts(window.start, end):
        seconds = int((min(next_hour(hour), end) - hour).total_seconds())
        for flavor_id, capacity, numerator, denominator in flavors:
            rows[(hour, flavor_id)] = (capacity * seconds, numerator, denominator)
    return rows


def guarantee_rows(window: Window, *, until: dt.datetime, accounts: Accounts | None = None,
                   team_ids: Iterable[int] | None = None) -> dict[GuaranteeKey, tuple[int, bool]]:
    """(hour, account id, flavor id) → (unit-seconds guaranteed, lends idle) from the teams' quota
    grants (each active over [valid_from, min(valid_until, ended_at))), up to `until`."""
    end = min(window.end, until)
    if end <= window.start:
        return {}
    accounts = accounts or Accounts()
    grants = QuotaGrant.objects.filter(valid_from__lt=end).filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=window.start)).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=window.start))
    if team_ids is not None:
        grants = grants.filter(team_id__in=list(team_ids))
    hours = Window(window.start, end).hours()
    sums: dict[GuaranteeKey, int] = defaultdict(int)
    lends: dict[int, bool] = {}
    for team_uid, lends_idle, flavor_id, units, valid_from, valid_until, ended_at in grants.values_list(
            "team__uid", "team__lends_idle", "flavor_id", "units", "valid_from", "valid_until", "ended_at"):
        stops = [t for t in (valid_until, ended_at) if t is not None]
        lower = max(second(valid_from), window.start)
        upper = min([second(t) for t in stops] + [end])
        if upper <= lower:
            continue
        account_id = accounts[team_uid]
        lends[account_id] = lends_idle
        for hour, seconds in _spread(hours, lower, upper):
            sums[(hour, account_id, flavor_id)] += units * seconds
    return {key: (value, lends[key[1]]) for key, value in sums.items() if value > 0}


def pool_rows(window: Window, *, until: dt.datetime) -> dict[PoolKey, int]:
    """(hour, flavor id) → unit-seconds the departments pooled of the flavor, summed over them, from
    their pool rows (each over [valid_from, ended_at)), up to `until`."""
    end = min(window.end, until)
    if end <= window.start:
        return {}
    pools = DepartmentPool.objects.filter(valid_from__lt=end).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=window.start))
    hours = Window(window.start, end).hours()
    sums: dict[PoolKey, int] = defaultdict(int)
    for flavor_id, units, valid_from, ended_at in pools.values_list("flavor_id", "units", "valid_from", "ended_at"):
        lower = max(second(valid_from), window.start)
        upper = min(second(ended_at), end) if ended_at is not None else end
        for hour, seconds in _spread(hours, lower, upper):
            sums[(hour, flavor_id)] += units * seconds
    return {key: value for key, value in sums.items() if value > 0}


def _spread(hours: list[dt.datetime], lower: dt.datetime, upper: dt.datetime) -> Iterator[tuple[dt.datetime, int]]:
    """The whole seconds of [lower, upper) in each of the hours (sorted hour starts) it touches."""
    for hour in hours[max(bisect_right(hours, lower) - 1, 0):]:
        if hour >= upper:
            break
        seconds = int((min(next_hour(hour), upper) - max(hour, lower)).total_seconds())
        if seconds > 0:
            yield hour, seconds
