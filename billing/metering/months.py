"""The monthly level (UsageMonth) and each flavor's hourly use (FlavorHour): exactly the hourly
rows of the complete hours, kept so as a refresh changes them (see billing.metering)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.db import connection
from django.db.models import Sum
from django.db.models.functions import TruncMonth

from billing.metering.rows import UsageKey, Window
from billing.metering.sql import pg_add, upserts
from billing.models import FlavorHour, UsageHour, UsageMonth
from billing.periods import billing_zone, local_date, month_bounds

MonthKey = tuple[dt.datetime, int, int, bool, int | None, int, int]  # month, account, flavor, borrowed, rate, fraction
MONTH_FIELDS = ("month", "account_id", "flavor_id", "borrowed", "rate_id", "fraction_numerator", "fraction_denominator")
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


def fold_complete_hours(window: Window, *, stored: dict[UsageKey, int], usage: dict[UsageKey, int],
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
                                    in flavor_hour_sums(start=window.start, end=end).items()], batch_size=500)


def _add_to_months(deltas: dict[MonthKey, int]) -> None:
    """Adds each difference to its UsageMonth row (made at need); rows that reach zero go."""
    if not deltas:
        return
    months = {key[0] for key in deltas}
    if upserts():
        table = connection.ops.quote_name(UsageMonth._meta.db_table)
        pg_add(UsageMonth, _MONTH_COLUMNS, [(*key, value) for key, value in deltas.items()], update=["unit_seconds"])
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE unit_seconds = 0 AND month = ANY(%s)", [sorted(months)])
        return
    existing = {tuple(values[:-2]): (values[-2], values[-1]) for values in UsageMonth.objects.filter(
        month__in=months).values_list(*MONTH_FIELDS, "id", "unit_seconds")}
    gone, updates, creates = [], [], []
    for key, delta in deltas.items():
        pk, value = existing.get(key, (None, 0))
        total = value + delta
        if pk is not None and total == 0:
            gone.append(pk)
        elif pk is not None:
            updates.append(UsageMonth(pk=pk, unit_seconds=total))
        else:
            creates.append(UsageMonth(**dict(zip(MONTH_FIELDS, key, strict=True)), unit_seconds=total))
    UsageMonth.objects.filter(pk__in=gone).delete()
    UsageMonth.objects.bulk_update(updates, ["unit_seconds"], batch_size=500)
    UsageMonth.objects.bulk_create(creates, batch_size=500)


def month_sums(*, start: dt.datetime, end: dt.datetime, through: dt.datetime) -> dict[MonthKey, int]:
    """From scratch: the UsageMonth rows of the local months beginning in [start, end), from the
    hourly rows before `through` (one grouped query)."""
    rows = (UsageHour.objects.filter(hour__gte=start, hour__lt=min(end, through))
            .annotate(month=TruncMonth("hour", tzinfo=billing_zone()))
            .values(*MONTH_FIELDS).annotate(total=Sum("unit_seconds")).order_by())
    sums: dict[MonthKey, int] = defaultdict(int)
    for row in rows:
        # The same instant periods.month_bounds gives, whichever offset the database answered in.
        sums[(month_bounds(local_date(row["month"]))[0], *(row[name] for name in MONTH_FIELDS[1:]))] += row["total"]
    return {key: value for key, value in sums.items() if value}


def flavor_hour_sums(*, start: dt.datetime, end: dt.datetime) -> dict[tuple[dt.datetime, int], int]:
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
    months = month_sums(start=first, end=through, through=through)
    UsageMonth.objects.bulk_create([UsageMonth(**dict(zip(MONTH_FIELDS, key, strict=True)), unit_seconds=value)
                                    for key, value in months.items()], batch_size=2000)
    FlavorHour.objects.bulk_create([FlavorHour(hour=hour, flavor_id=flavor_id, unit_seconds=value) for (hour, flavor_id), value
                                    in flavor_hour_sums(start=first, end=through).items()], batch_size=2000)
