"""The refresh that brings the rollups up to now: which hours it recomputes, for which accounts,
under the one lock that makes refreshes take turns."""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from billing.metering.months import fold_complete_hours, months_rebuild
from billing.metering.rows import Accounts, LentUsage, Window, capacity_rows, ceil_hour, guarantee_rows, second, usage_rows
from billing.metering.sql import chunks
from billing.metering.store import (
    lent_of,
    lent_usage,
    store_capacity,
    store_guarantees,
    store_lent,
    store_usage,
    stored_lent_usage,
)
from billing.models import MeteringState
from billing.periods import hour_floor
from billing.rates.card import RateCard
from jobs.models import RunInterval
from portal.collector import collector_paused


def _dirty_windows(ranges: list[tuple[dt.datetime, dt.datetime]], until: dt.datetime) -> list[Window]:
    """Merged whole-hour windows covering the ranges, none past `until`."""
    spans = sorted((hour_floor(lower), min(ceil_hour(upper), until)) for lower, upper in ranges if upper > lower)
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


# What the pause buys: a refresh builds ~100,000 tuples, none in a cycle, which otherwise set off
# full collections (six more over benchmarks/billing_rollups.py's 10,000 pods and 5 minutes): the
# refresh's portal CPU is 0.19-0.20 s a minute on average with it, 0.22-0.25 s without; its wall
# time is the same within the runs' noise (median 0.36-0.39 s either way).
@collector_paused()
def rollups_refresh(*, until: dt.datetime | None = None) -> int:
    """Brings the rollups up to `until` (now by default, never later than now, never back before
    the watermark): open intervals are metered up to it, closed ones fully. Idempotent. Returns
    how many hours of usage were recomputed."""
    now = timezone.now()
    until = second(min(until or now, now))
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
            previous = min([second(started) for _, started, _, _, _ in pending] + [until])
        accounts = Accounts()
        windows = _windows_to_recompute(pending, previous=previous, until=until, accounts=accounts)
        lending = _usage_recompute(windows, until=until, accounts=accounts, sealed=state.months_through)
        # Refreshes take turns on the state row's lock, so the rows each store reads are all there are.
        recorded = Window(hour_floor(previous), until)
        store_capacity(recorded, capacity_rows(recorded, until=until))
        store_guarantees(recorded, guarantee_rows(recorded, until=until, accounts=accounts))
        for window, borrowing in lending:
            store_lent(window, lent_of(window, borrowing, until=until))
        _mark_metered(pending, until)
        MeteringState.objects.filter(pk=state.pk).update(metered_until=until, months_through=hour_floor(until),
                                                         refreshed_at=now)
    return sum(len(window.hours()) for window, _ in windows)


def _usage_recompute(windows: list[tuple[Window, set[int] | None]], *, until: dt.datetime, accounts: Accounts,
                     sealed: dt.datetime | None) -> list[tuple[Window, list[LentUsage]]]:
    """Recomputes and stores the windows' usage rows (of their accounts, where given) and folds the
    change into the monthly level, whose complete hours now end at the hour holding `until` (it
    ended at `sealed`; never built yet: built from the hourly rows). Returns what each window's
    lent hours are to be worked out from."""
    card = RateCard.read()  # one read of the prices for every window
    sealing = hour_floor(until)
    lending: list[tuple[Window, list[LentUsage]]] = []
    for window, account_ids in windows:
        if account_ids is None:
            usage = usage_rows(window, until=until, card=card, accounts=accounts)
        else:
            usage = usage_rows(window, until=until, card=card, accounts=accounts,
                               team_uids=accounts.team_uids(account_ids))
        stored = store_usage(window, usage, account_ids=account_ids)
        if sealed is not None:
            fold_complete_hours(window, stored=stored, usage=usage, sealed=sealed, sealing=sealing)
        # Lent hours weigh every account's usage of the hour: an hour recomputed for some accounts
        # only takes the others' from the rows stored.
        lending.append((window, lent_usage(usage) if account_ids is None else stored_lent_usage(window)))
    if sealed is None:
        months_rebuild(through=sealing)
    return lending


Pending = list[tuple[int, dt.datetime, dt.datetime | None, dt.datetime | None, uuid.UUID]]  # id, start, end, metered, team


def _windows_to_recompute(pending: Pending, *, previous: dt.datetime, until: dt.datetime,
                          accounts: Accounts) -> list[tuple[Window, set[int] | None]]:
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
    for chunk in chunks(still_open):
        RunInterval.objects.filter(pk__in=chunk).update(metered_until=until)
    for chunk in chunks(ended_by_now):
        RunInterval.objects.filter(pk__in=chunk, ended_at__lte=until).update(metered_until=F("ended_at"), settled=True)


def watermark() -> dt.datetime | None:
    """How far the rollups go: hours before the one holding it are complete."""
    return MeteringState.objects.order_by("pk").values_list("metered_until", flat=True).first()
