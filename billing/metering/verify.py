"""Checks of the rollups: what changed since the last refresh, and a from-scratch recomputation
compared with what is stored (`manage.py billing_verify`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Q

from billing.ledger import lent_rows
from billing.metering.months import MONTH_FIELDS, flavor_hour_sums, month_sums
from billing.metering.refresh import watermark
from billing.metering.rows import UsageKey, Window, guarantee_rows, overlaps, pool_rows, usage_rows
from billing.metering.store import USAGE_FIELDS
from billing.models import Account, CapacityHour, FlavorHour, GuaranteeHour, LentHour, MeteringState, UsageHour, UsageMonth
from billing.periods import hour_floor, local_date, month_bounds
from jobs.models import RunInterval
from tenants.models import Flavor


def pending(*, start: dt.datetime, end: dt.datetime) -> int:
    """Intervals in the period that changed since the last refresh (new, or closed at another point
    than they were metered to): a recomputation counts them as they are now, the rollups not yet."""
    until = watermark()
    window = Window(start, end)
    intervals = RunInterval.objects.filter(overlaps(window), settled=False)
    if until is None:
        return intervals.count()
    return intervals.filter(Q(metered_until__isnull=True, started_at__lt=until)
                            | Q(ended_at__isnull=False, ended_at__lt=until)).count()


def recompute(*, start: dt.datetime, end: dt.datetime) -> list[str]:
    """The differences, in words, between a from-scratch computation of the hours in [start, end)
    (up to the watermark) and the stored rollups; empty when they are equal to the unit-second.
    Usage is compared in full, guarantees for the teams that still exist (a deleted team's grants
    are gone with it), lent hours with `billing.ledger.lent_rows` applied to the recomputed usage,
    the stored guarantees and the departments' pools, and each hour with usage must have its flavor's capacity row."""
    until = watermark()
    window = Window(hour_floor(start), end)
    names = _Names(accounts=dict(Account.objects.values_list("id", "slug")),
                   flavors=dict(Flavor.objects.values_list("id", "name")))
    computed = usage_rows(window, until=until) if until is not None else {}
    stored = {tuple(values[:-1]): values[-1] for values in UsageHour.objects.filter(
        hour__gte=window.start, hour__lt=window.end).values_list(*USAGE_FIELDS, "unit_seconds")}
    differences = [f"{_usage_words(key, names)}: the rollup holds {stored.get(key, 0)} unit-seconds, "
                   f"recomputed {computed.get(key, 0)}."
                   for key in sorted(set(computed) | set(stored), key=_sort_key) if computed.get(key, 0) != stored.get(key, 0)]
    if until is None:
        return differences
    differences += _lent_differences(window, until=until, computed=computed, names=names)
    capacity = set(CapacityHour.objects.filter(hour__gte=window.start, hour__lt=window.end).values_list("hour", "flavor_id"))
    differences += _guarantee_differences(window, until=until, recorded={hour for hour, _ in capacity}, names=names)
    differences += _complete_hours_differences(window, names=names.accounts, flavors=names.flavors)
    active = set(Flavor.objects.filter(is_active=True).values_list("id", flat=True))
    for hour, flavor_id in sorted({(key[0], key[2]) for key in stored if key[2] in active} - capacity):
        differences.append(f"{hour:%Y-%m-%d %H:%M} {names.flavors.get(flavor_id, flavor_id)}: usage without a capacity row.")
    return differences


@dataclass(frozen=True)
class _Names:
    """Accounts' slugs and flavors' names by id, for the differences' words."""

    accounts: dict[int, str]
    flavors: dict[int, str]

    def of(self, hour: dt.datetime, account_id: int, flavor_id: int) -> str:
        return f"{hour:%Y-%m-%d %H:%M} {self.accounts.get(account_id, account_id)} {self.flavors.get(flavor_id, flavor_id)}"


def _lent_differences(window: Window, *, until: dt.datetime, computed: dict[UsageKey, int], names: _Names) -> list[str]:
    """LentHour of the window against `billing.ledger.lent_rows` of the recomputed usage, the
    stored guarantees and the pools."""
    ours = lent_rows(usage=((key[0], key[1], key[2], key[5], value) for key, value in computed.items()),
                     guarantees=GuaranteeHour.objects.filter(
                         hour__gte=window.start, hour__lt=window.end, lends_idle=True).values_list(
                         "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"),
                     pools=pool_rows(window, until=until))
    theirs = {(hour, account_id, flavor_id): value for hour, account_id, flavor_id, value in LentHour.objects.filter(
        hour__gte=window.start, hour__lt=window.end).values_list("hour", "account_id", "flavor_id", "unit_seconds")}
    return [f"{names.of(*key)}: the lent rollup holds {theirs.get(key, 0)} unit-seconds, recomputed {ours.get(key, 0)}."
            for key in sorted(set(ours) | set(theirs)) if ours.get(key, 0) != theirs.get(key, 0)]


def _guarantee_differences(window: Window, *, until: dt.datetime, recorded: set[dt.datetime], names: _Names) -> list[str]:
    """GuaranteeHour of the teams that still exist against their grants, in the hours whose capacity was recorded."""
    live = Account.objects.filter(team__isnull=False)
    live_ids = set(live.values_list("id", flat=True))
    computed = guarantee_rows(window, until=until, team_ids=live.values_list("team_id", flat=True))
    stored = {(hour, account_id, flavor_id): (value, lends) for hour, account_id, flavor_id, value, lends in
              GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=min(window.end, until),
                                           account_id__in=live_ids).values_list(
                  "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle")}
    ours = {key: value[0] for key, value in computed.items() if key[0] in recorded}
    theirs = {key: value[0] for key, value in stored.items() if key[0] in recorded}
    return [f"{names.of(*key)}: the guarantee rollup holds {theirs.get(key, 0)} unit-seconds, the grants give "
            f"{ours.get(key, 0)}." for key in sorted(set(ours) | set(theirs)) if ours.get(key, 0) != theirs.get(key, 0)]


def _complete_hours_differences(window: Window, *, names: dict[int, str], flavors: dict[int, str]) -> list[str]:
    """UsageMonth of every month the window touches, and FlavorHour of the window's hours, against
    sums of the hourly rows of the complete hours (before `months_through`)."""
    through = MeteringState.objects.order_by("pk").values_list("months_through", flat=True).first()
    first, _ = month_bounds(local_date(window.start))
    _, last = month_bounds(local_date(window.end - dt.timedelta(seconds=1)))
    differences: list[str] = []
    stored_m = {tuple(values[:-1]): values[-1] for values in UsageMonth.objects.filter(
        month__gte=first, month__lt=last).values_list(*MONTH_FIELDS, "unit_seconds")}
    computed_m = month_sums(start=first, end=last, through=through) if through is not None else {}
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
    computed_f = flavor_hour_sums(start=window.start, end=end) if through is not None else {}
    for hour, flavor_id in sorted(set(computed_f) | set(stored_f)):
        ours, theirs = computed_f.get((hour, flavor_id), 0), stored_f.get((hour, flavor_id), 0)
        if ours != theirs:
            differences.append(f"{hour:%Y-%m-%d %H:%M} {flavors.get(flavor_id, flavor_id)}: the flavor's hourly use holds "
                               f"{theirs} unit-seconds, the teams' rows add up to {ours}.")
    return differences


def _sort_key(key: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(-1 if value is None else value for value in key)


def _usage_words(key: tuple[object, ...], names: _Names) -> str:
    hour, account_id, flavor_id, _, owner, borrowed, rate_id, numerator, denominator = key
    assert isinstance(hour, dt.datetime) and isinstance(account_id, int) and isinstance(flavor_id, int)
    return (f"{names.of(hour, account_id, flavor_id)} "
            f"{owner or '(no owner)'} {'borrowed' if borrowed else 'guaranteed'} "
            f"{'rate #' + str(rate_id) if rate_id else 'no rate'} {numerator}/{denominator}")
