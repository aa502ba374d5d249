"""Makes the stored rollup rows of a window equal the rows computed from scratch, writing only
the differences: usage, capacity, guarantees and lent hours."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection

from django.db.models import Sum

from billing.ledger import LentKey, lent_rows
from billing.metering.rows import GuaranteeKey, LentUsage, UsageKey, Window, hourly, pool_rows
from billing.metering.sql import GUARANTEE_COLUMNS, LENT_COLUMNS, USAGE_COLUMNS, chunks, pg_insert, pg_update_by_id, upserts
from billing.models import Account, CapacityHour, GuaranteeHour, LentHour, UsageHour

USAGE_FIELDS = ("hour", "account_id", "flavor_id", "owner_key", "owner_username", "borrowed", "rate_id",
                 "fraction_numerator", "fraction_denominator")


def store_usage(window: Window, rows: dict[UsageKey, int], *, account_ids: Collection[int] | None = None
                 ) -> dict[UsageKey, int]:
    """Makes the stored UsageHour rows of the window's hours (of these accounts, when given) equal
    `rows`, writing only differences; returns the rows as they were."""
    stored = UsageHour.objects.filter(hour__gte=window.start, hour__lt=window.end)
    if account_ids is not None:
        stored = stored.filter(account_id__in=list(account_ids))
    existing = {tuple(values[:-2]): (values[-2], values[-1]) for values in hourly(
        stored, (*USAGE_FIELDS, "id", "unit_seconds"), window)}
    before = {key: value for key, (_, value) in existing.items()}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    changed = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
    for chunk in chunks(stale):
        UsageHour.objects.filter(pk__in=chunk).delete()
    if not changed:
        return before
    if upserts():
        pg_update_by_id(UsageHour, [(existing[key][0], value) for key, value in changed.items() if key in existing],
                         ("unit_seconds", "bigint"))
        pg_insert(UsageHour, USAGE_COLUMNS, [(*key, value) for key, value in changed.items() if key not in existing],
                   keys=len(USAGE_FIELDS))
        return before
    objects = [UsageHour(**dict(zip(USAGE_FIELDS, key, strict=True)), unit_seconds=value)
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


def store_capacity(window: Window, rows: dict[tuple[dt.datetime, int], tuple[int, int, int]]) -> None:
    """Makes the window's CapacityHour rows equal `rows`."""
    existing = {(hour, flavor_id): (pk, (value, num, den)) for pk, hour, flavor_id, value, num, den in
                CapacityHour.objects.filter(hour__gte=window.start, hour__lt=window.end).values_list(
                    "id", "hour", "flavor_id", "unit_seconds", "fraction_numerator", "fraction_denominator")}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    for chunk in chunks(stale):
        CapacityHour.objects.filter(pk__in=chunk).delete()
    changed = [CapacityHour(pk=existing[key][0] if key in existing else None, hour=key[0], flavor_id=key[1],
                            unit_seconds=value, fraction_numerator=num, fraction_denominator=den)
               for key, (value, num, den) in rows.items() if existing.get(key, (None, None))[1] != (value, num, den)]
    CapacityHour.objects.bulk_update([obj for obj in changed if obj.pk is not None],
                                     ["unit_seconds", "fraction_numerator", "fraction_denominator"], batch_size=500)
    CapacityHour.objects.bulk_create([obj for obj in changed if obj.pk is None], batch_size=500)


def store_guarantees(window: Window, rows: dict[GuaranteeKey, tuple[int, bool]]) -> None:
    """Makes the window's GuaranteeHour rows equal `rows`, except rows of deleted teams' accounts,
    which keep what was recorded while the team existed."""
    gone = set(Account.objects.filter(team_deleted_at__isnull=False).values_list("id", flat=True))
    existing = {(hour, account_id, flavor_id): (pk, (value, lends)) for pk, hour, account_id, flavor_id, value, lends in
                hourly(GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=window.end),
                        ("id", "hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"), window)}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows and key[1] not in gone]
    for chunk in chunks(stale):
        GuaranteeHour.objects.filter(pk__in=chunk).delete()
    if upserts():
        differing = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
        pg_update_by_id(GuaranteeHour, [(existing[key][0], *value) for key, value in differing.items() if key in existing],
                         ("unit_seconds", "bigint"), ("lends_idle", "boolean"))
        pg_insert(GuaranteeHour, GUARANTEE_COLUMNS, [(*key, *value) for key, value in differing.items()
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


def lent_usage(usage: dict[UsageKey, int]) -> list[LentUsage]:
    """What the lent rule needs of the usage rows: (hour, account, flavor, borrowed) sums, only of
    the hours and flavors somebody borrowed."""
    sums: dict[tuple[dt.datetime, int, int, bool], int] = defaultdict(int)
    for key, value in usage.items():
        sums[(key[0], key[1], key[2], key[5])] += value
    return _where_borrowed([(*key, value) for key, value in sums.items()])


def stored_lent_usage(window: Window) -> list[LentUsage]:
    """`lent_usage` of the window's stored rows, every account's, summed by the database."""
    return _where_borrowed(list(hourly(UsageHour.objects.filter(hour__gte=window.start, hour__lt=window.end)
                                        .values("hour", "account_id", "flavor_id", "borrowed")
                                        .annotate(total=Sum("unit_seconds")).order_by(),
                                        ("hour", "account_id", "flavor_id", "borrowed", "total"), window)))


def _where_borrowed(sums: list[LentUsage]) -> list[LentUsage]:
    """The sums of the hours and flavors in which somebody borrowed: the only ones lending weighs."""
    borrowed = {(hour, flavor_id) for hour, _, flavor_id, on_borrowed, value in sums if on_borrowed and value}
    return [row for row in sums if (row[0], row[2]) in borrowed]


def lent_of(window: Window, usage: list[LentUsage], *, until: dt.datetime) -> dict[LentKey, int]:
    """The LentHour rows of the window's hours from their usage, the stored guarantees (a deleted
    team's kept rows included: it lent while it existed) and the departments' pools."""
    flavors = {flavor_id for _, _, flavor_id, borrowed, _ in usage if borrowed}
    if not flavors:
        return {}
    guarantees = hourly(GuaranteeHour.objects.filter(hour__gte=window.start, hour__lt=window.end, flavor_id__in=flavors,
                                                      lends_idle=True),
                         ("hour", "account_id", "flavor_id", "unit_seconds", "lends_idle"), window)
    return lent_rows(usage=usage, guarantees=guarantees, pools=pool_rows(window, until=until))


def store_lent(window: Window, rows: dict[LentKey, int]) -> None:
    """Makes the window's LentHour rows equal `rows`, writing only differences."""
    existing = {(hour, account_id, flavor_id): (pk, value) for pk, hour, account_id, flavor_id, value in
                hourly(LentHour.objects.filter(hour__gte=window.start, hour__lt=window.end),
                        ("id", "hour", "account_id", "flavor_id", "unit_seconds"), window)}
    stale = [pk for key, (pk, _) in existing.items() if key not in rows]
    for chunk in chunks(stale):
        LentHour.objects.filter(pk__in=chunk).delete()
    changed = {key: value for key, value in rows.items() if existing.get(key, (None, None))[1] != value}
    if upserts():
        pg_update_by_id(LentHour, [(existing[key][0], value) for key, value in changed.items() if key in existing],
                         ("unit_seconds", "bigint"))
        pg_insert(LentHour, LENT_COLUMNS, [(*key, value) for key, value in changed.items() if key not in existing],
                   keys=3)
        return
    objects = [LentHour(pk=existing[key][0] if key in existing else None, hour=key[0], account_id=key[1],
                        flavor_id=key[2], unit_seconds=value) for key, value in changed.items()]
    LentHour.objects.bulk_update([obj for obj in objects if obj.pk is not None], ["unit_seconds"], batch_size=500)
    LentHour.objects.bulk_create([obj for obj in objects if obj.pk is None], batch_size=500)
