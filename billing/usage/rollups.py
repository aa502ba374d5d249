"""The grouped reads of the hourly rollups that every usage figure starts from, and what they
share: the fields that make a statement line, the one currency a figure is shown in, and the read
that takes the monthly level wherever it holds the hours asked for.

Usage is read from the rollups only, in a fixed number of grouped queries, so a page costs the
same with ten teams or a thousand and never scans a month of raw intervals. Costs stay exact
`Fraction`s until shown and are rounded by billing.money's rule (billing.figures).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db.models import Case, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from billing import money, periods
from billing.figures import LINE_FIELDS
from billing.models import MeteringState, UsageHour, UsageMonth
from billing.rates.card import RateCard
from portal.errors import DomainError
from tenants.models import Flavor


@dataclass(frozen=True)
class Line:
    """One shown line: a label, GPU-hours and cost, rounded by billing.money's rule."""

    key: object
    label: str
    gpu_hours: Decimal
    cost: Decimal


def line_fields(*fields: str) -> tuple[str, ...]:
    """`fields` and what makes a statement line (billing.figures.LINE_FIELDS), each once."""
    return tuple(dict.fromkeys((*fields, *LINE_FIELDS)))


def one_currency(currencies: set[str], *, what: str, card: RateCard | None = None) -> str:
    """The one currency of priced usage, or a refusal in words: a month is billed in one currency.
    Usage with no price is shown in the rate card's default currency (`card`, read when not given)."""
    if len(currencies) > 1:
        raise DomainError(f"{what} is priced in {' and '.join(sorted(currencies))}; a month is billed in one currency, "
                          "so finance must set every flavor's rate in the same currency.")
    if currencies:
        return next(iter(currencies))
    return (card or RateCard.read()).default_currency


def gpu_hours_of(unit_seconds: int, flavor: Flavor) -> Fraction:
    """Physical GPU-hours of a flavor's unit-seconds."""
    return money.gpu_hours(unit_seconds=unit_seconds, numerator=flavor.fraction_numerator,
                           denominator=flavor.fraction_denominator)


MONTHLY_KEYS = {"account_id", "flavor_id", "borrowed"}  # what UsageMonth keeps besides the line key


def rollup_sums(*, start: dt.datetime, end: dt.datetime, fields: tuple[str, ...],
                account_ids: list[int] | None = None) -> QuerySet[Any, dict[str, Any]]:
    """The usage of [start, end) grouped by `fields` (ones UsageMonth keeps) with its
    `unit_seconds`, from the monthly level wherever it holds the hours asked for, in one statement.

    Per local month the range touches: when the range begins with the month, UsageMonth holds
    [month start, months_through) of it, so it is read, plus the hourly rows from months_through,
    as long as months_through falls inside the range (or the range runs to the month's end); any
    other piece of a month is read from the hourly rows. `months_through` is read inside the same
    statement, so a refresh committing meanwhile cannot count an hour twice or not at all. Rows of
    one key may come back several times (a month's level and its open hours): callers add them."""
    through = Subquery(MeteringState.objects.order_by("pk").values("months_through")[:1])
    parts: list[QuerySet[Any, Any]] = []
    at = start
    while at < end:
        month_begins, month_ends = periods.month_bounds(periods.local_date(at))
        piece_end = min(end, month_ends)
        hourly = UsageHour.objects.filter(hour__gte=at, hour__lt=piece_end)
        if at == month_begins:
            monthly = UsageMonth.objects.filter(month=month_begins)
            if piece_end < month_ends:  # part of the month: its level is usable only if it stops inside
                monthly = monthly.alias(through=through).filter(through__lte=piece_end)
                hourly = hourly.alias(through=through).filter(hour__gte=Case(
                    When(through__lte=piece_end, then=Greatest("through", Value(at))), default=Value(at)))
            else:
                hourly = hourly.filter(hour__gte=Coalesce(through, Value(at)))
            parts.append(monthly)
        parts.append(hourly)
        at = piece_end
    grouped = []
    for part in parts:
        if account_ids is not None:
            part = part.filter(account_id__in=account_ids)
        grouped.append(part.values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    if not grouped:
        return UsageHour.objects.none().values(*fields).annotate(unit_seconds=Sum("unit_seconds"))
    return grouped[0].union(*grouped[1:], all=True)
