"""The metering engine: run intervals become hourly rollups (UsageHour, CapacityHour, GuaranteeHour,
LentHour).

How a second is counted
    An interval [started_at, ended_at) is cut at whole seconds (instants are truncated, so two
    intervals that meet share no second), then split at every local hour boundary of the billing
    time zone, at every rate change of its flavor (Rate.effective_from) and at every moment its
    workload moved between guaranteed and borrowed quota (RunIntervalSwitch). Each piece lands in
    exactly one UsageHour row: the hour it lies in, the interval's account, flavor, owner,
    borrowed state, rate and fraction. A still-open interval counts up to the refresh's `until`.

How the rollups stay current (incremental, idempotent)
    `MeteringState.metered_until` is the watermark W. A refresh up to `until` recomputes from
    scratch every hour from the one holding W up to `until` (the open hour is always recomputed),
    plus, in any older hour an interval changed since it was metered, the rows of that interval's
    account (a row holds one account's intervals, so the other accounts' rows there are exact
    already). An interval a refresh has seen (`metered_until` set) is in the rollups up to W while
    it is open; one that appeared late marks the hours from its start as dirty, and one that closed
    before W marks the hours between its end and W. An interval metered to its end is `settled` and
    never read again, so a refresh reads only new and newly closed intervals to find its hours (the
    open ones are in the hours it recomputes anyway), not the month. Recomputing an hour, or an
    account's rows in it, makes them equal a computation from scratch, so running a refresh twice,
    or after a crash, gives the same rows.

Capacity and guarantees are recorded as time passes
    A flavor's capacity has no history in the catalog, and a deleted team's grants are gone with
    it, so CapacityHour and GuaranteeHour rows are written for the hours a refresh moves the
    watermark across (the open hour up to `until`) and kept afterwards. Rows of an account
    whose team is deleted are never rewritten.

The monthly level and each flavor's hourly use (UsageMonth, FlavorHour)
    hold exactly the hourly rows of the complete hours: those before `MeteringState.months_through`,
    the hour holding the watermark. A refresh folds into them what it changed in complete hours
    (the difference between the rows it read and the rows it wrote: late intervals) and the hours
    its watermark crossed, so the open hour, rewritten every minute, never touches them; readers
    add the open hours' UsageHour rows in the same statement. A state without `months_through`
    (rows made before this level existed) is filled from the hourly rows once.

Lent hours follow the usage
    Every hour a refresh recomputes gets its LentHour rows again from that hour's usage (every
    account's: summed from the stored rows where only some accounts' were recomputed) and the
    stored guarantees, by `billing.ledger.lent_rows` (the one rule), so the ledger reads who lent
    what without reading every team's hours.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import BigIntegerField, F, Func, Model, Q, QuerySet, Sum
from django.db.models.functions import TruncMonth
from django.utils import timezone

from billing.ledger import LentKey, lent_rows
from billing.models import Account, CapacityHour, FlavorHour, GuaranteeHour, LentHour, MeteringState, Rate, UsageHour, UsageMonth
from billing.periods import billing_zone, hour_floor, hour_starts, local_date, month_bounds, next_hour
from jobs.models import RunInterval, RunIntervalSwitch
from portal.collector import collector_paused
from tenants.models import Flavor, QuotaGrant, Team

# (hour, account id, flavor id, owner's user id, owner's username, borrowed, rate id, fraction numerator, denominator)
UsageKey = tuple[dt.datetime, int, int, int | None, str, bool, int | None, int, int]
GuaranteeKey = tuple[dt.datetime, int, int]  # hour, account id, flavor id
LentUsage = tuple[dt.datetime, int, int, bool, int]  # hour, account id, flavor id, borrowed, unit-seconds
_UPDATE_CHUNK = 5000


def _second(instant: dt.datetime) -> dt.datetime:
    return instant.replace(microsecond=0)


def _ceil_hour(instant: dt.datetime) -> dt.datetime:
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


def _epoch(instant: dt.datetime) -> int:
    """Whole seconds since the epoch, truncated: the unit every cut is made in."""
    return int(instant.timestamp())


class _Splitter:
    """Cuts intervals into (hour, borrowed, rate) pieces inside one window; pure given its inputs.
    Works on whole epoch seconds: every instant is truncated to its second before it is compared."""

    def __init__(self, window: Window, rates: dict[int, list[tuple[dt.datetime, int]]]) -> None:
        self.hours = window.hours()
        self.bounds = [_epoch(hour) for hour in self.hours]
        self.start, self.end = _epoch(window.start), _epoch(window.end)
        # flavor id → [(effective_from in epoch seconds, rate id)], ascending
        self.rates = {flavor_id: [(_epoch(at), rate_id) for at, rate_id in changes] for flavor_id, changes in rates.items()}

    def _rate_at(self, flavor_id: int, instant: int) -> int | None:
        changes = self.rates.get(flavor_id)
        if not changes:
            return None
        index = bisect_right(changes, (instant, float("inf"))) - 1
        return changes[index][1] if index >= 0 else None

    def pieces(self, *, flavor_id: int, start: int, end: int, borrowed: bool,
               switches: list[tuple[int, bool]]) -> Iterator[tuple[int, bool, int | None, int]]:
        """(hour index, borrowed, rate id, seconds) for the part of [start, end) inside the window."""
        lower, upper = max(start, self.start), min(end, self.end)
        if upper <= lower:
            return
        bounds = self.bounds
        index = bisect_right(bounds, lower) - 1
        changes = self.rates.get(flavor_id, ())
        next_bound = bounds[index + 1] if index + 1 < len(bounds) else upper
        if not switches and upper <= next_bound and not any(lower < at < upper for at, _ in changes):
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
        cuts.update(at for at, _ in changes if lower < at < upper)
        cuts.update(bound for bound in bounds[index + 1:] if bound < upper)
        here = lower
        for cut in [*sorted(cuts), upper]:
            while index + 1 < len(bounds) and bounds[index + 1] <= here:
                index += 1
            yield index, state, self._rate_at(flavor_id, here), cut - here
            state = states.get(cut, state)
            here = cut


def _rates() -> dict[int, list[tuple[dt.datetime, int]]]:
    rates: dict[int, list[tuple[dt.datetime, int]]] = defaultdict(list)
    for flavor_id, effective_from, rate_id in Rate.objects.order_by("flavor_id", "effective_from", "id").values_list(
            "flavor_id", "effective_from", "id"):
        rates[flavor_id].append((_second(effective_from), rate_id))
    return rates


class _Accounts:
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


def _overlapping(window: Window) -> Q:
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
                converted[position] = _epoch(converted[position])
        yield tuple(converted)


def _instants(queryset: QuerySet[Any], fields: tuple[str, ...], instants: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """values_list of the fields, the `instants` among them as epoch seconds."""
    if connection.vendor == "postgresql":
        annotated = queryset.annotate(**{f"{name}_s": _epoch_column(name) for name in instants})
        return iter(annotated.values_list(*[f"{name}_s" if name in instants else name for name in fields]))
    return _seconds_of(queryset.values_list(*fields), tuple(fields.index(name) for name in instants))


def _hourly(queryset: QuerySet[Any], fields: tuple[str, ...], window: Window) -> Iterator[tuple[Any, ...]]:
    """values_list of the fields of rollup rows of the window's hours, "hour" among them given as the
    window's own hour instants: the database sends epoch seconds, so the thousands of rows a
    refresh reads back cost no datetime parsing."""
    hours = {_epoch(hour): hour for hour in window.hours()}
    position = fields.index("hour")
    for row in _instants(queryset, fields, ("hour",)):
        found = list(row)
        found[position] = hours.get(row[position]) or dt.datetime.fromtimestamp(row[position], dt.UTC)
        yield tuple(found)


def usage_rows(window: Window, *, until: dt.datetime, rates: dict[int, list[tuple[dt.datetime, int]]] | None = None,
               accounts: _Accounts | None = None, team_uids: Collection[uuid.UUID] | None = None) -> dict[UsageKey, int]:
    """From scratch: the UsageHour rows of the window's hours, open intervals counted up to `until`;
    only the rows of the accounts of `team_uids` when given (a row holds one account's intervals)."""
    window = Window(window.start, min(window.end, until))
    if window.end <= window.start:
        return {}
    splitter = _Splitter(window, _rates() if rates is None else rates)
    accounts = accounts or _Accounts()
    overlapping = RunInterval.objects.filter(_overlapping(window))
    if team_uids is not None:
        overlapping = overlapping.filter(team_uid__in=list(team_uids))
    switches: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for interval_id, at, borrowed in _instants(RunIntervalSwitch.objects.filter(
            interval__in=overlapping).order_by("at", "id"), ("interval_id", "at", "borrowed"), ("at",)):
        switches[interval_id].append((at, borrowed))
    sums: dict[tuple[int, int, int, int | None, str, bool, int | None, int, int], int] = defaultdict(int)
    cut_off = _epoch(until)
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


def guarantee_rows(window: Window, *, until: dt.datetime, accounts: _Accounts | None = None,
                   team_ids: Iterable[int] | None = None) -> dict[GuaranteeKey, tuple[int, bool]]:
    """(hour, account id, flavor id) → (unit-seconds guaranteed, lends idle) from the teams' quota
    grants (each active over [valid_from, min(valid_until, ended_at))), up to `until`."""
    end = min(window.end, until)
    if end <= window.start:
        return {}
    accounts = accounts or _Accounts()
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
        lower = max(_second(valid_from), window.start)
        upper = min([_second(t) for t in stops] + [end])
        if upper <= lower:
            continue
        account_id = accounts[team_uid]
        lends[account_id] = lends_idle
        index = max(bisect_right(hours, lower) - 1, 0)
        for hour in hours[index:]:
            if hour >= upper:
                break
            seconds = int((min(next_hour(hour), upper) - max(hour, lower)).total_seconds())
            if seconds > 0:
                sums[(hour, account_id, flavor_id)] += units * seconds
    return {key: (value, lends[key[1]]) for key, value in sums.items() if value > 0}


def _dirty_windows(ranges: list[tuple[dt.datetime, dt.datetime]], until: dt.datetime) -> list[Window]:
    """Merged whole-hour windows covering the ranges, none past `until`."""
    spans = sorted((hour_floor(lower), min(_ceil_hour(upper), until)) for lower, upper in ranges if upper > lower)
    merged: list[list[dt.datetime]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [Window(start, end) for start, end in merged if end > start]


def _lock_state() -> MeteringState:
    """The one row whose lock serializes refreshes. Two first refreshes at once (two watchers
    closing intervals on a fresh install) must not each make a row of their own, lock it and write
    the same rollups: the row is made under a fixed key, so the second waits for the first's."""
    if not MeteringState.objects.exists():
        MeteringState.objects.get_or_create(pk=1)
    state = MeteringState.objects.select_for_update().order_by("pk").first()
    assert state is not None  # made just above; metering state is never deleted
    # An UPDATE takes SQLite's write lock too, so two refreshes never interleave there either.
    MeteringState.objects.filter(pk=state.pk).update(refreshed_at=timezone.now())
    return state


@collector_paused()  # ~100,000 tuples a refresh, no cycles: a full collection took a third of its CPU (benchmark)
def rollups_refresh(*, until: dt.datetime | None = None) -> int:
    """Brings the rollups up to `until` (now by default, never later than now, never back before
    the watermark): open intervals are metered up to it, closed ones fully. Idempotent. Returns
    how many hours of usage were recomputed."""
    now = timezone.now()
    until = _second(min(until or now, now))
    with transaction.atomic():
        state = _lock_state()
        previous = state.metered_until
        if previous is not None and until < previous:
            until = previous
        # Open intervals already metered are in the rollups up to the previous watermark: the hours
        # from there are recomputed anyway, so only new and newly closed intervals are read here.
        pending = list(RunInterval.objects.filter(settled=False).filter(
            Q(metered_until__isnull=True) | Q(ended_at__isnull=False)).values_list("id", "started_at", "ended_at",
                                                                                  "metered_until", "team_uid"))
        if previous is None:
            previous = min([_second(started) for _, started, _, _, _ in pending] + [until])
        rates, accounts = _rates(), _Accounts()
        windows = _windows_to_recompute(pending, previous=previous, until=until, accounts=accounts)
        hours = 0
        lending: list[tuple[Window, list[LentUsage]]] = []
        sealed, sealing = state.months_through, hour_floor(until)
        for window, account_ids in windows:
            if account_ids is None:
                usage = usage_rows(window, until=until, rates=rates, accounts=accounts)
            else:
                usage = usage_rows(window, until=until, rates=rates, accounts=accounts,
                                   team_uids=accounts.team_uids(account_ids))
            stored = _store_usage(window, usage, account_ids=account_ids)
            if sealed is not None:
                _fold_complete_hours(window, stored=stored, usage=usage, sealed=sealed, sealing=sealing)
            # Lent hours weigh every account's usage of the hour: an hour recomputed for some accounts
            # only takes the others' from the rows stored.
            lending.append((window, _lent_usage(usage) if account_ids is None else _stored_lent_usage(window)))
            hours += len(window.hours())
        if sealed is None:
            months_rebuild(through=sealing)
        # Refreshes take turns on the state row's lock, so the rows each store reads are all there are.
        recorded = Window(hour_floor(previous), until)
        _store_capacity(recorded, capacity_rows(recorded, until=until))
        _store_guarantees(recorded, guarantee_rows(recorded, until=until, accounts=accounts))
        for window, lent_usage in lending:
            _store_lent(window, _lent_of(window, lent_usage))
        _mark_metered(pending, until)
        MeteringState.objects.filter(pk=state.pk).update(metered_until=until, months_through=sealing, refreshed_at=now)
    return hours


Pending = list[tuple[int, dt.datetime, dt.datetime | None, dt.datetime | None, uuid.UUID]]  # id, start, end, metered, team


def _windows_to_recompute(pending: Pending, *, previous: dt.datetime, until: dt.datetime,
                          accounts: _Accounts) -> list[tuple[Window, set[int] | None]]:
    """The windows a refresh recomputes, oldest first, each with the accounts whose rows it
    recomputes (None: all). The hours from the one holding the watermark are recomputed whole (every
    open interval grew); an older hour only for the accounts with an interval that changed in it
    (found late, or closed before the watermark), since a row holds one account's intervals and
    nothing else changes a complete hour: the other accounts' rows there are already exact. The
    minute after an hour ends, a few pods closed late must not cost recomputing the whole hour."""
    open_hours = hour_floor(previous)
    late: list[tuple[dt.datetime, dt.datetime, uuid.UUID]] = []
    for _, started, ended, metered, team_uid in pending:
        end = until if ended is None else min(ended, until)
        lower, upper = (started, end) if metered is None else (min(previous, end), max(previous, end))
        upper = min(upper, open_hours)
        if lower < upper:
            late.append((lower, upper, team_uid))
    windows: list[tuple[Window, set[int] | None]] = []
    for window in _dirty_windows([(lower, upper) for lower, upper, _ in late], open_hours):
        windows.append((window, {accounts[team_uid] for lower, upper, team_uid in late
                                 if lower < window.end and upper > window.start}))
    windows += [(window, None) for window in _dirty_windows([(open_hours, until)], until)]
    return windows


def _mark_metered(pending: Pending, until: dt.datetime) -> None:
    still_open = [pk for pk, _, ended, metered, _ in pending if metered is None and (ended is None or ended > until)]
    ended_by_now = [pk for pk, _, ended, _, _ in pending if ended is not None and ended <= until]
    for chunk in _chunks(still_open):
        RunInterval.objects.filter(pk__in=chunk).update(metered_until=until)
    for chunk in _chunks(ended_by_now):
        RunInterval.objects.filter(pk__in=chunk, ended_at__lte=until).update(metered_until=F("ended_at"), settled=True)


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for index in range(0, len(ids), _UPDATE_CHUNK):
        yield ids[index:index + _UPDATE_CHUNK]


_USAGE_FIELDS = ("hour", "account_id", "flavor_id", "owner_key", "owner_username", "borrowed", "rate_id",
                 "fraction_numerator", "fraction_denominator")


def _upserts() -> bool:
    """PostgreSQL writes each kind of change in one statement from a JSON payload (rows updated by
    id, new rows inserted, the monthly level's differences added by an upsert on its unique key);
    SQLite has no NULLS NOT DISTINCT key to upsert on (the rate may be empty), so there rows are
    updated and created apart by the ORM."""
    return connection.vendor == "postgresql"


# (column, PostgreSQL array type); the key columns come first, as the unique constraints list them.
_USAGE_COLUMNS = (("hour", "timestamptz"), ("account_id", "bigint"), ("flavor_id", "bigint"), ("owner_key", "bigint"),
                  ("owner_username", "text"),
                  ("borrowed", "boolean"), ("rate_id", "bigint"), ("fraction_numerator", "integer"),
                  ("fraction_denominator", "integer"), ("unit_seconds", "bigint"))
_GUARANTEE_COLUMNS = (("hour", "timestamptz"), ("account_id", "bigint"), ("flavor_id", "bigint"),
                      ("unit_seconds", "bigint"), ("lends_idle", "boolean"))
_LENT_COLUMNS = (("hour", "timestamptz"), ("account_id", "bigint"), ("flavor_id", "bigint"), ("unit_seconds", "bigint"))


def _pg_insert_select(model: type[Model], columns: tuple[tuple[str, str], ...], rows: list[tuple[object, ...]],
                      *, keys: int) -> tuple[str, str]:
    """INSERT … SELECT of all rows in one statement: thousands of rows a minute cost one statement,
    not thousands of model instances. The rows travel as one JSON text (instants as epoch seconds)
    that PostgreSQL unpacks itself, cheaper for the client than binding each value. They go in
    ordered by the first `keys` columns (the unique key's), the first of them (the hour) last:
    rows in a row check the same account's foreign key, and when several hours go in at once (a
    first refresh, a catch-up) the open hour's rows, which every refresh rewrites, share their
    pages with complete hours' rows, so the room those pages keep holds their new versions (HOT
    updates; ordered by hour, the first minute after a 7-hour first refresh cost PostgreSQL 0.30 s
    of CPU instead of 0.15 s)."""
    names = [name for name, _ in columns]
    payload = json.dumps([[_epoch(value) if kind == "timestamptz" else value  # type: ignore[arg-type]
                           for value, (_, kind) in zip(row, columns, strict=True)] for row in rows])
    selected = ", ".join(f"to_timestamp((r->>{n})::bigint)" if kind == "timestamptz" else f"(r->>{n})::{kind}"
                         for n, (_, kind) in enumerate(columns))
    return (f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({', '.join(names)}) "
            f"SELECT {selected} FROM jsonb_array_elements(%s::jsonb) AS r "
            f"ORDER BY {', '.join(str(n + 1) for n in [*range(1, keys), 0])}"), payload


def _pg_insert(model: type[Model], columns: tuple[tuple[str, str], ...], rows: list[tuple[object, ...]],
               *, keys: int) -> None:
    """Inserts rows whose keys are not stored: the refresh read the stored ones under the lock that
    serialises refreshes, so no conflict is possible and none is probed for (a duplicate would be
    the database's unique violation, loud). The hour's first refresh inserts ~10,000 usage rows at
    10,000 running pods: ordered and without the upsert's probe they cost PostgreSQL 0.15 s of CPU,
    foreign-key checks included, against 0.19 to 0.27 s (2026-11-26)."""
    if not rows:
        return
    sql, payload = _pg_insert_select(model, columns, rows, keys=keys)
    with connection.cursor() as cursor:
        cursor.execute(sql, [payload])


def _pg_add(model: type[Model], columns: tuple[tuple[str, str], ...], rows: list[tuple[object, ...]],
            *, update: list[str]) -> None:
    """Adds each row's `update` values to the stored row of its key, inserting the rows not stored:
    one INSERT … SELECT … ON CONFLICT DO UPDATE."""
    if not rows:
        return
    keys = [name for name, _ in columns if name not in update]
    sql, payload = _pg_insert_select(model, columns, rows, keys=len(keys))
    table = connection.ops.quote_name(model._meta.db_table)
    sql += (f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
            + ", ".join(f"{name} = {table}.{name} + EXCLUDED.{name}" for name in update))
    with connection.cursor() as cursor:
        cursor.execute(sql, [payload])


def _pg_update_by_id(model: type[Model], rows: list[tuple[object, ...]],
                     *columns: tuple[str, str]) -> None:
    """One UPDATE … FROM a JSON payload of (id, values…): rows found by primary key, which costs
    less than the upsert's probe of the eight-column key for the open hour's thousands of rows."""
    if not rows:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    assignments = ", ".join(f"{name} = (r->>{n + 1})::{kind}" for n, (name, kind) in enumerate(columns))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {assignments} FROM jsonb_array_elements(%s::jsonb) AS r "
                       f"WHERE {table}.id = (r->>0)::bigint", [json.dumps(rows)])


def _store_usage(window: Window, rows: dict[UsageKey, int], *, account_ids: Collection[int] | None = None
                 ) -> dict[UsageKey, int]:
    """Makes the stored UsageHour rows of the window's hours (of these accounts, when given) equal
    `rows`, writing only differences; returns the rows as they were."""
    stored = UsageHour.objects.filter(hour__gte=window.start, hour__lt=window.end)
    if account_ids is not None:
        stored = stored.filter(account_id__in=list(account_ids))
    existing = {tuple(values[:-2]): (values[-2], values[-1]) for values in _hourly(
        stored, (*_USAGE_FIELDS, "id", "unit_seconds"), window)}
    before = {key: value for key, (_, value) in existing.items()}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    changed = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
    for chunk in _chunks(stale):
        UsageHour.objects.filter(pk__in=chunk).delete()
    if not changed:
        return before
    if _upserts():
        _pg_update_by_id(UsageHour, [(existing[key][0], value) for key, value in changed.items() if key in existing],
                         ("unit_seconds", "bigint"))
        _pg_insert(UsageHour, _USAGE_COLUMNS, [(*key, value) for key, value in changed.items() if key not in existing],
                   keys=len(_USAGE_FIELDS))
        return before
    objects = [UsageHour(**dict(zip(_USAGE_FIELDS, key, strict=True)), unit_seconds=value)
               for key, value in changed.items()]
    updates, creates = [], []
    for obj, key in zip(objects, changed, strict=True):
        if key in existing:
            obj.pk = existing[key][0]
            updates.append(obj)
        else:
            creates.append(obj)
    UsageHour.objects.bulk_update(updates, ["unit_seconds"], batch_size=500)
    UsageHour.objects.bulk_create(creates, batch_size=500)
    return before


MonthKey = tuple[dt.datetime, int, int, bool, int | None, int, int]  # month, account, flavor, borrowed, rate, fraction
_MONTH_FIELDS = ("month", "account_id", "flavor_id", "borrowed", "rate_id", "fraction_numerator", "fraction_denominator")
_MONTH_COLUMNS = (("month", "timestamptz"), ("account_id", "bigint"), ("flavor_id", "bigint"), ("borrowed", "boolean"),
                  ("rate_id", "bigint"), ("fraction_numerator", "integer"), ("fraction_denominator", "integer"),
                  ("unit_seconds", "bigint"))


class _MonthOf(dict[dt.datetime, dt.datetime]):
    """hour → the instant its local month begins, worked out once per hour."""

    def __missing__(self, hour: dt.datetime) -> dt.datetime:
        self[hour] = month_bounds(local_date(hour))[0]
        return self[hour]


def _month_key(key: UsageKey, month_of: _MonthOf) -> MonthKey:
    hour, account_id, flavor_id, _, _, borrowed, rate_id, numerator, denominator = key
    return (month_of[hour], account_id, flavor_id, borrowed, rate_id, numerator, denominator)


def _fold_complete_hours(window: Window, *, stored: dict[UsageKey, int], usage: dict[UsageKey, int],
                         sealed: dt.datetime, sealing: dt.datetime) -> None:
    """Keeps UsageMonth and FlavorHour equal to the hourly rows before `sealing` (the new
    months_through), given that they held those before `sealed` (the old one) and that the window's
    hourly rows went from `stored` to `usage` (all of them, or some accounts' only): an hour already
    complete adds its change, an hour completing now adds all of it, the open hour nothing. Each
    flavor's hourly use is summed again from the stored rows, which hold every account's."""
    if window.start >= sealing:
        return  # only the open hour: the common minute
    month_of = _MonthOf()
    deltas: dict[MonthKey, int] = defaultdict(int)
    for key, value in usage.items():
        if key[0] < sealing:
            deltas[_month_key(key, month_of)] += value
    for key, value in stored.items():
        if key[0] < sealed:
            deltas[_month_key(key, month_of)] -= value
    _add_to_months({key: value for key, value in deltas.items() if value})
    end = min(window.end, sealing)
    FlavorHour.objects.filter(hour__gte=window.start, hour__lt=end).delete()
    FlavorHour.objects.bulk_create([FlavorHour(hour=hour, flavor_id=flavor_id, unit_seconds=value) for (hour, flavor_id), value
                                    in _flavor_hour_sums(start=window.start, end=end).items()], batch_size=500)


def _add_to_months(deltas: dict[MonthKey, int]) -> None:
    """Adds each difference to its UsageMonth row (made at need); rows that reach zero go."""
    if not deltas:
        return
    months = {key[0] for key in deltas}
    if _upserts():
        table = connection.ops.quote_name(UsageMonth._meta.db_table)
        _pg_add(UsageMonth, _MONTH_COLUMNS, [(*key, value) for key, value in deltas.items()], update=["unit_seconds"])
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE unit_seconds = 0 AND month = ANY(%s)", [sorted(months)])
        return
    existing = {tuple(values[:-2]): (values[-2], values[-1]) for values in UsageMonth.objects.filter(
        month__in=months).values_list(*_MONTH_FIELDS, "id", "unit_seconds")}
    gone, updates, creates = [], [], []
    for key, delta in deltas.items():
        pk, value = existing.get(key, (None, 0))
        total = value + delta
        if pk is not None and total == 0:
            gone.append(pk)
        elif pk is not None:
            updates.append(UsageMonth(pk=pk, unit_seconds=total))
        else:
            creates.append(UsageMonth(**dict(zip(_MONTH_FIELDS, key, strict=True)), unit_seconds=total))
    UsageMonth.objects.filter(pk__in=gone).delete()
    UsageMonth.objects.bulk_update(updates, ["unit_seconds"], batch_size=500)
    UsageMonth.objects.bulk_create(creates, batch_size=500)


def _month_sums(*, start: dt.datetime, end: dt.datetime, through: dt.datetime) -> dict[MonthKey, int]:
    """From scratch: the UsageMonth rows of the local months beginning in [start, end), from the
    hourly rows before `through` (one grouped query)."""
    rows = (UsageHour.objects.filter(hour__gte=start, hour__lt=min(end, through))
            .annotate(month=TruncMonth("hour", tzinfo=billing_zone()))
            .values(*_MONTH_FIELDS).annotate(total=Sum("unit_seconds")).order_by())
    sums: dict[MonthKey, int] = defaultdict(int)
    for row in rows:
        # The same instant periods.month_bounds gives, whichever offset the database answered in.
        sums[(month_bounds(local_date(row["month"]))[0], *(row[name] for name in _MONTH_FIELDS[1:]))] += row["total"]
    return {key: value for key, value in sums.items() if value}


def _flavor_hour_sums(*, start: dt.datetime, end: dt.datetime) -> dict[tuple[dt.datetime, int], int]:
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end).values("hour", "flavor_id").annotate(
        total=Sum("unit_seconds")).order_by()
    return {(row["hour"], row["flavor_id"]): row["total"] for row in rows if row["total"]}


def months_rebuild(*, through: dt.datetime) -> None:
    """Makes UsageMonth and FlavorHour from the hourly rows before `through`, from scratch: when
    metering first runs with this level (rows made before it existed), and for a benchmark that
    writes hourly rows itself."""
    UsageMonth.objects.all().delete()
    FlavorHour.objects.all().delete()
    first = UsageHour.objects.order_by("hour").values_list("hour", flat=True).first()
    if first is None:
        return
    months = _month_sums(start=first, end=through, through=through)
    UsageMonth.objects.bulk_create([UsageMonth(**dict(zip(_MONTH_FIELDS, key, strict=True)), unit_seconds=value)
                                    for key, value in months.items()], batch_size=2000)
    FlavorHour.objects.bulk_create([FlavorHour(hour=hour, flavor_id=flavor_id, unit_seconds=value) for (hour, flavor_id), value
                                    in _flavor_hour_sums(start=first, end=through).items()], batch_size=2000)


def _store_capacity(window: Window, rows: dict[tuple[dt.datetime, int], tuple[int, int, int]]) -> None:
    """Makes the window's CapacityHour rows equal `rows`."""
    existing = {(hour, flavor_id): (pk, (value, num, den)) for pk, hour, flavor_id, value, num, den in
                CapacityHour.objects.filter(hour__gte=window.start, hour__lt=window.end).values_list(
                    "id", "hour", "flavor_id", "unit_seconds", "fraction_numerator", "fraction_denominator")}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    for chunk in _chunks(stale):
        CapacityHour.objects.filter(pk__in=chunk).delete()
    changed = [CapacityHour(pk=existing[key][0] if key in existing else None, hour=key[0], flavor_id=key[1],
                            unit_seconds=value, fraction_numerator=num, fraction_denominator=den)
               for key, (value, num, den) in rows.items() if existing.get(key, (None, None))[1] != (value, num, den)]
    CapacityHour.objects.bulk_update([obj for obj in changed if obj.pk is not None],
                                     ["unit_seconds", "fraction_numerator", "fraction_denominator"], batch_size=500)
    CapacityHour.objects.bulk_create([obj for obj in changed if obj.pk is None], batch_size=500)


def _store_guarantees(window: Window, rows: dict[GuaranteeKey, tuple[int, bool]]) -> None:
    """Makes the window's GuaranteeHour rows equal `rows`, except rows of deleted teams' accounts,
    which keep what was recorded while the team existed."""
    gone = set(Account.objects.filter(team_deleted_at__isnull=False).values_list("id", flat=True))
    existing = {(hour, account_id, flavor_id): (pk, (value, lends)) for pk, hour, account_id, flavor_id, value, lends in
                _hourly(GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=window.end),
                        ("id", "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"), window)}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows and key[1] not in gone]
    for chunk in _chunks(stale):
        GuaranteeHour.objects.filter(pk__in=chunk).delete()
    if _upserts():
        differing = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
        _pg_update_by_id(GuaranteeHour, [(existing[key][0], *value) for key, value in differing.items() if key in existing],
                         ("unit_seconds", "bigint"), ("lends_idle", "boolean"))
        _pg_insert(GuaranteeHour, _GUARANTEE_COLUMNS, [(*key, *value) for key, value in differing.items()
                                                       if key not in existing], keys=3)
        return
    changed = [GuaranteeHour(hour=key[0], account_id=key[1], flavor_id=key[2], unit_seconds=value, lends_idle=lends)
               for key, (value, lends) in rows.items() if existing.get(key, (None, None))[1] != (value, lends)]
    updates = []
    for obj in changed:
        key = (obj.hour, obj.account_id, obj.flavor_id)
        if key in existing:
            obj.pk = existing[key][0]
            updates.append(obj)
    GuaranteeHour.objects.bulk_update(updates, ["unit_seconds", "lends_idle"], batch_size=500)
    GuaranteeHour.objects.bulk_create([obj for obj in changed if obj.pk is None], batch_size=500)


def _lent_usage(usage: dict[UsageKey, int]) -> list[LentUsage]:
    """What the lent rule needs of the usage rows: (hour, account, flavor, borrowed) sums, only of
    the hours and flavors somebody borrowed."""
    sums: dict[tuple[dt.datetime, int, int, bool], int] = defaultdict(int)
    for key, value in usage.items():
        sums[(key[0], key[1], key[2], key[5])] += value
    return _where_borrowed([(*key, value) for key, value in sums.items()])


def _stored_lent_usage(window: Window) -> list[LentUsage]:
    """`_lent_usage` of the window's stored rows, every account's, summed by the database."""
    return _where_borrowed(list(_hourly(UsageHour.objects.filter(hour__gte=window.start, hour__lt=window.end)
                                        .values("hour", "account_id", "flavor_id", "borrowed")
                                        .annotate(total=Sum("unit_seconds")).order_by(),
                                        ("hour", "account_id", "flavor_id", "borrowed", "total"), window)))


def _where_borrowed(sums: list[LentUsage]) -> list[LentUsage]:
    """The sums of the hours and flavors in which somebody borrowed: the only ones lending weighs."""
    borrowed = {(hour, flavor_id) for hour, _, flavor_id, on_borrowed, value in sums if on_borrowed and value}
    return [row for row in sums if (row[0], row[2]) in borrowed]


def _lent_of(window: Window, usage: list[LentUsage]) -> dict[LentKey, int]:
    """The LentHour rows of the window's hours from their usage and the stored guarantees (a
    deleted team's kept rows included: it lent while it existed)."""
    flavors = {flavor_id for _, _, flavor_id, borrowed, _ in usage if borrowed}
    if not flavors:
        return {}
    guarantees = _hourly(GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=window.end, flavor_id__in=flavors,
                                                      lends_idle=True),
                         ("hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"), window)
    return lent_rows(usage=usage, guarantees=guarantees)


def _store_lent(window: Window, rows: dict[LentKey, int]) -> None:
    """Makes the window's LentHour rows equal `rows`, writing only differences."""
    existing = {(hour, account_id, flavor_id): (pk, value) for pk, hour, account_id, flavor_id, value in
                _hourly(LentHour.objects.filter(hour__gte=window.start, hour__lt=window.end),
                        ("id", "hour", "account_id", "flavor_id", "unit_seconds"), window)}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    for chunk in _chunks(stale):
        LentHour.objects.filter(pk__in=chunk).delete()
    changed = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
    if _upserts():
        _pg_update_by_id(LentHour, [(existing[key][0], value) for key, value in changed.items() if key in existing],
                         ("unit_seconds", "bigint"))
        _pg_insert(LentHour, _LENT_COLUMNS, [(*key, value) for key, value in changed.items() if key not in existing],
                   keys=3)
        return
    objects = [LentHour(pk=existing[key][0] if key in existing else None, hour=key[0], account_id=key[1],
                        flavor_id=key[2], unit_seconds=value) for key, value in changed.items()]
    LentHour.objects.bulk_update([obj for obj in objects if obj.pk is not None], ["unit_seconds"], batch_size=500)
    LentHour.objects.bulk_create([obj for obj in objects if obj.pk is None], batch_size=500)


def watermark() -> dt.datetime | None:
    """How far the rollups go: hours before the one holding it are complete."""
    return MeteringState.objects.order_by("pk").values_list("metered_until", flat=True).first()


def pending(*, start: dt.datetime, end: dt.datetime) -> int:
    """Intervals in the period that changed since the last refresh (new, or closed at another point
    than they were metered to): a recomputation counts them as they are now, the rollups not yet."""
    until = watermark()
    window = Window(start, end)
    intervals = RunInterval.objects.filter(_overlapping(window), settled=False)
    if until is None:
        return intervals.count()
    return intervals.filter(Q(metered_until__isnull=True, started_at__lt=until)
                            | Q(ended_at__isnull=False, ended_at__lt=until)).count()


def recompute(*, start: dt.datetime, end: dt.datetime) -> list[str]:
    """The differences, in words, between a from-scratch computation of the hours in [start, end)
    (up to the watermark) and the stored rollups; empty when they are equal to the unit-second.
    Usage is compared in full, guarantees for the teams that still exist (a deleted team's grants
    are gone with it), lent hours with `billing.ledger.lent_rows` applied to the recomputed usage
    and the stored guarantees, and each hour with usage must have its flavor's capacity row."""
    until = watermark()
    window = Window(hour_floor(start), end)
    differences: list[str] = []
    names = dict(Account.objects.values_list("id", "slug"))
    flavors = dict(Flavor.objects.values_list("id", "name"))
    computed = usage_rows(window, until=until) if until is not None else {}
    stored = {tuple(values[:-1]): values[-1] for values in UsageHour.objects.filter(
        hour__gte=window.start, hour__lt=window.end).values_list(*_USAGE_FIELDS, "unit_seconds")}
    for key in sorted(set(computed) | set(stored), key=_sort_key):
        ours, theirs = computed.get(key, 0), stored.get(key, 0)
        if ours != theirs:
            differences.append(f"{_usage_words(key, names, flavors)}: the rollup holds {theirs} unit-seconds, "
                               f"recomputed {ours}.")
    if until is None:
        return differences
    computed_l = lent_rows(usage=((key[0], key[1], key[2], key[5], value) for key, value in computed.items()),
                           guarantees=GuaranteeHour.objects.filter(
                               hour__gte=window.start, hour__lt=window.end, lends_idle=True).values_list(
                               "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"))
    stored_l = {(hour, account_id, flavor_id): value for hour, account_id, flavor_id, value in LentHour.objects.filter(
        hour__gte=window.start, hour__lt=window.end).values_list("hour", "account_id", "flavor_id", "unit_seconds")}
    for key in sorted(set(computed_l) | set(stored_l)):
        ours_l, theirs_l = computed_l.get(key, 0), stored_l.get(key, 0)
        if ours_l != theirs_l:
            differences.append(f"{key[0]:%Y-%m-%d %H:%M} {names.get(key[1], key[1])} {flavors.get(key[2], key[2])}: "
                               f"the lent rollup holds {theirs_l} unit-seconds, recomputed {ours_l}.")
    live = Account.objects.filter(team__isnull=False)
    live_ids = set(live.values_list("id", flat=True))
    computed_g = guarantee_rows(window, until=until, team_ids=live.values_list("team_id", flat=True))
    stored_g = {(hour, account_id, flavor_id): (value, lends) for hour, account_id, flavor_id, value, lends in
                GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=min(window.end, until),
                                             account_id__in=live_ids).values_list(
                    "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle")}
    capacity = set(CapacityHour.objects.filter(hour__gte=window.start, hour__lt=window.end).values_list("hour", "flavor_id"))
    recorded = {hour for hour, _ in capacity}
    computed_g = {key: value for key, value in computed_g.items() if key[0] in recorded}
    stored_g = {key: value for key, value in stored_g.items() if key[0] in recorded}
    for key in sorted(set(computed_g) | set(stored_g)):
        ours_g, theirs_g = computed_g.get(key, (0, True))[0], stored_g.get(key, (0, True))[0]
        if ours_g != theirs_g:
            differences.append(f"{key[0]:%Y-%m-%d %H:%M} {names.get(key[1], key[1])} {flavors.get(key[2], key[2])}: "
                               f"the guarantee rollup holds {theirs_g} unit-seconds, the grants give {ours_g}.")
    differences += _complete_hours_differences(window, names=names, flavors=flavors)
    active = set(Flavor.objects.filter(is_active=True).values_list("id", flat=True))
    for hour, flavor_id in sorted({(key[0], key[2]) for key in stored if key[2] in active} - capacity):
        differences.append(f"{hour:%Y-%m-%d %H:%M} {flavors.get(flavor_id, flavor_id)}: usage without a capacity row.")
    return differences


def _complete_hours_differences(window: Window, *, names: dict[int, str], flavors: dict[int, str]) -> list[str]:
    """UsageMonth of every month the window touches, and FlavorHour of the window's hours, against
    sums of the hourly rows of the complete hours (before `months_through`)."""
    through = MeteringState.objects.order_by("pk").values_list("months_through", flat=True).first()
    first, _ = month_bounds(local_date(window.start))
    _, last = month_bounds(local_date(window.end - dt.timedelta(seconds=1)))
    differences: list[str] = []
    stored_m = {tuple(values[:-1]): values[-1] for values in UsageMonth.objects.filter(
        month__gte=first, month__lt=last).values_list(*_MONTH_FIELDS, "unit_seconds")}
    computed_m = _month_sums(start=first, end=last, through=through) if through is not None else {}
    for key in sorted(set(computed_m) | set(stored_m), key=_sort_key):
        ours, theirs = computed_m.get(key, 0), stored_m.get(key, 0)
        if ours != theirs:
            month, account_id, flavor_id, borrowed, rate_id, numerator, denominator = key
            differences.append(
                f"{month:%Y-%m} {names.get(account_id, account_id)} {flavors.get(flavor_id, flavor_id)} "
                f"{'borrowed' if borrowed else 'guaranteed'} {'rate #' + str(rate_id) if rate_id else 'no rate'} "
                f"{numerator}/{denominator}: the monthly rollup holds {theirs} unit-seconds, the hourly rows add up to {ours}.")
    end = window.end if through is None else min(window.end, through)
    stored_f = {(hour, flavor_id): value for hour, flavor_id, value in FlavorHour.objects.filter(
        hour__gte=window.start, hour__lt=window.end).values_list("hour", "flavor_id", "unit_seconds")}
    computed_f = _flavor_hour_sums(start=window.start, end=end) if through is not None else {}
    for hour, flavor_id in sorted(set(computed_f) | set(stored_f)):
        ours, theirs = computed_f.get((hour, flavor_id), 0), stored_f.get((hour, flavor_id), 0)
        if ours != theirs:
            differences.append(f"{hour:%Y-%m-%d %H:%M} {flavors.get(flavor_id, flavor_id)}: the flavor's hourly use holds "
                               f"{theirs} unit-seconds, the teams' rows add up to {ours}.")
    return differences


def _sort_key(key: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(-1 if value is None else value for value in key)


def _usage_words(key: tuple[object, ...], names: dict[int, str], flavors: dict[int, str]) -> str:
    hour, account_id, flavor_id, _, owner, borrowed, rate_id, numerator, denominator = key
    assert isinstance(hour, dt.datetime)
    return (f"{hour:%Y-%m-%d %H:%M} {names.get(account_id, account_id)} {flavors.get(flavor_id, flavor_id)} "  # type: ignore[call-overload]
            f"{owner or '(no owner)'} {'borrowed' if borrowed else 'guaranteed'} "
            f"{'rate #' + str(rate_id) if rate_id else 'no rate'} {numerator}/{denominator}")
