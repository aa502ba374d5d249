"""Exact quantities and money, and the one rule by which every figure is rounded.

GPU-seconds and amounts are `Fraction`s until they are shown. The rule, on every page, export
and API answer:

1. A *line* is what a month's statement bills on one row: one team (account), one local month,
   one flavor, one rate (price) and one fraction of a GPU. Its amount is its exact cost rounded
   once, half-even, to the currency's minor unit; its GPU-hours are rounded the same way to the
   hundredth (`ROUNDING_HOURS`).
2. A figure for several whole lines (a team's month, a flavor's total, the overview's total, a
   budget's spend) is the sum of their rounded lines.
3. A figure for part of a line (one person's, one day's, the borrowed part) is that line's
   rounded amount shared among its parts in proportion to their exact shares, by the largest
   remainder (`apportion`), so the parts of a line always add up to the line, and the shown
   parts of a total to the total.

Money a person types (a price, a budget, an adjustment) is read by `money_input`, bounded by the
column that keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from math import gcd
from typing import Protocol, TypeVar

from portal.adapters import decimal_number
from portal.errors import DomainError

K = TypeVar("K")

# ISO 4217 minor units that are not 2; every other three-letter code has cents.
_MINOR_UNITS = {"BHD": 3, "CLP": 0, "IQD": 3, "ISK": 0, "JOD": 3, "JPY": 0, "KRW": 0, "KWD": 3, "LYD": 3, "OMR": 3,
                "PYG": 0, "TND": 3, "UGX": 0, "VND": 0, "XAF": 0, "XOF": 0, "XPF": 0}
SECONDS_PER_HOUR = 3600
ROUNDING_HOURS = 2  # GPU-hours are shown to the hundredth; costs to the currency's minor unit


def minor_unit(currency: str) -> int:
    """Digits after the decimal point in the currency's smallest coin (2 for USD and EUR, 0 for JPY)."""
    return _MINOR_UNITS.get(currency.upper(), 2)


def gpu_seconds(*, unit_seconds: int, numerator: int, denominator: int) -> Fraction:
    return Fraction(unit_seconds * numerator, denominator)


def gpu_hours(*, unit_seconds: int, numerator: int, denominator: int) -> Fraction:
    return gpu_seconds(unit_seconds=unit_seconds, numerator=numerator, denominator=denominator) / SECONDS_PER_HOUR


def priced_numerator(numerator: int, denominator: int) -> int:
    """The part of a unit its flavor's price is for, over `denominator`: a GPU flavor's price is per
    physical GPU-hour, so its unit costs its fraction of one; a CPU-only flavor's unit is no part
    of a GPU (fraction 0/1: it adds nothing to GPU-hours) and its price is per unit-hour, whole."""
    return numerator or denominator


def borrowed_factor(discount_percent: Decimal | int) -> Fraction:
    """What a borrowed hour costs of a guaranteed one at a rate whose discount for borrowed
    (preemptible) hours is `discount_percent`: 1 at 0 %, 7/10 at 30 %. The one place it is worked out."""
    return 1 - Fraction(discount_percent) / 100


def discount_words(discount_percent: Decimal) -> str:
    """A rate's discount for borrowed hours as pages say it: "30 % off", "12.5 % off"; "" for none."""
    return f"{discount_percent.normalize():f} % off" if discount_percent else ""


def price_factor(*, borrowed: bool, discount_percent: Decimal | int) -> Fraction:
    """The factor on a rate's price for hours run borrowed or not."""
    return borrowed_factor(discount_percent) if borrowed else Fraction(1)


def cost(*, unit_seconds: int, numerator: int, denominator: int, price_per_gpu_hour: Decimal,
         borrowed: bool = False, discount_percent: Decimal | int = 0) -> Fraction:
    """The exact, unrounded cost of the usage at its flavor's price (per physical GPU-hour, or per
    unit-hour of a CPU-only flavor: `priced_numerator`); borrowed hours at the rate's discount."""
    return (Fraction(unit_seconds * priced_numerator(numerator, denominator), denominator * SECONDS_PER_HOUR)
            * Fraction(price_per_gpu_hour) * price_factor(borrowed=borrowed, discount_percent=discount_percent))


def row_cost(row: Mapping[str, object]) -> Fraction:
    """The exact cost of a grouped rollup row carrying `billing.figures.LINE_FIELDS` and
    `unit_seconds` (nothing while its hours had no price)."""
    if row["rate_id"] is None:
        return Fraction(0)
    return cost(unit_seconds=row["unit_seconds"], numerator=row["fraction_numerator"],  # type: ignore[arg-type]
                denominator=row["fraction_denominator"], price_per_gpu_hour=row["rate__price_per_gpu_hour"],  # type: ignore[arg-type]
                borrowed=bool(row["borrowed"]), discount_percent=row["rate__borrowed_discount_percent"])  # type: ignore[arg-type]


def round_money(value: Fraction | Decimal | int, currency: str) -> Decimal:
    """Rounded half-even to the currency's minor unit: done once per statement line."""
    return round_places(value, minor_unit(currency))


def round_places(value: Fraction | Decimal | int, places: int) -> Decimal:
    """Exactly rounded half-even to `places` decimals (Fraction's round() is half-even)."""
    scaled = round(Fraction(value) * 10**places)
    return Decimal(scaled).scaleb(-places)


def apportion(total: int, shares: Mapping[K, Fraction]) -> dict[K, int]:
    """Shares `total` whole minor units (cents, or hundredths of a GPU-hour) among the keys in
    proportion to their exact `shares`, whose sum rounds to `total`: each key gets its share
    rounded down, and the units left over go one each to the largest remainders (ties to the
    first key in sorted order, so the same inputs always share alike). The results add up to
    `total` exactly and none is more than one unit off its exact share (Hamilton's method)."""
    exact = sum(shares.values(), Fraction(0))
    if not shares:
        return {}
    if exact == 0:
        # Parts of nothing (an unpriced line's cost): all of it, if any, to the first key.
        keys = sorted(shares, key=_order)
        return {key: (total if index == 0 else 0) for index, key in enumerate(keys)}
    scaled = {key: share * total / exact for key, share in shares.items()}
    given = {key: math.floor(value) for key, value in scaled.items()}
    left = total - sum(given.values())
    by_remainder = sorted(scaled, key=lambda key: (-(scaled[key] - given[key]), _order(key)))
    for key in by_remainder[:left]:
        given[key] += 1
    return given


def _order(key: object) -> tuple[str, ...]:
    return tuple(str(part) for part in key) if isinstance(key, tuple) else (str(key),)


def in_minor_units(value: Decimal, places: int) -> int:
    """A rounded figure as whole minor units: 12.34 at 2 places is 1234."""
    return int(value.scaleb(places))


def round_ratio(numerator: int, denominator: int, places: int) -> Decimal:
    """numerator / denominator (denominator > 0) rounded half-even to `places` decimals, in
    integers: what round_places does, without a Fraction (pages that round thousands of figures
    spend their time there otherwise)."""
    whole, rest = divmod(numerator * 10**places, denominator)
    if 2 * rest > denominator or (2 * rest == denominator and whole % 2):
        whole += 1
    return Decimal(whole).scaleb(-places)


def per_denominator_ratio(parts: dict[int, int]) -> tuple[int, int]:
    """The exact sum of value / denominator over {denominator: value}, as one integer ratio over
    the denominators' least common multiple."""
    common = 1
    for denominator in parts:
        common = common * denominator // gcd(common, denominator)
    return sum(value * (common // denominator) for denominator, value in parts.items()), common


def rounded_cost(*, parts: dict[tuple[int, int, bool], int], price_per_gpu_hour: Decimal, currency: str,
                 discount_percent: Decimal | int = 0) -> Decimal:
    """round_money of the summed `cost` of the parts ((numerator, denominator, borrowed) →
    unit-seconds) at one price and its discount for borrowed hours, worked out in integers: the
    same half-even rounding of the same exact sum."""
    sums: dict[bool, dict[int, int]] = {False: {}, True: {}}
    for (part, denominator, borrowed), unit_seconds in parts.items():
        by_denominator = sums[borrowed]
        by_denominator[denominator] = by_denominator.get(denominator, 0) + unit_seconds * priced_numerator(part, denominator)
    guaranteed, common = per_denominator_ratio({**dict.fromkeys(sums[True], 0), **sums[False]})
    borrowed_sum, _ = per_denominator_ratio({**dict.fromkeys(sums[False], 0), **sums[True]})
    factor = borrowed_factor(discount_percent)
    price, price_denominator = price_per_gpu_hour.as_integer_ratio()
    return round_ratio((guaranteed * factor.denominator + borrowed_sum * factor.numerator) * price,
                       common * factor.denominator * SECONDS_PER_HOUR * price_denominator, minor_unit(currency))


# --- Money typed in ----------------------------------------------------------------------------


class DecimalColumn(Protocol):
    """What money_input needs of a model's DecimalField."""

    @property
    def max_digits(self) -> int | None: ...

    @property
    def decimal_places(self) -> int | None: ...


def money_input(value: object, *, column: DecimalColumn, field: str, noun: str, example: str,
                places: int | None = None, unit: str = "", most: Decimal | None = None) -> Decimal:
    """Money as a page, the API or the admin gave it, read only if its column can keep it.

    Text is read as portal.adapters.decimal_number reads it (ASCII digits, an optional sign,
    decimal point, exponent and commas between thousands); a number is written out first. A value
    with more decimals than `places` (the column's when None) or more digits before the point
    than the column holds is refused in words naming `field` (PostgreSQL refused the insert, a
    500; SQLite stored it and every cost page then failed to read it). `most` is a smaller bound
    the caller's rule sets. The sign is the caller's rule. Trailing zeros beyond `places` are
    dropped ("3.5000" is 3.50 in USD)."""
    a_noun = f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"
    the_noun = a_noun[0].upper() + a_noun[1:]
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise DomainError(f"Give the {noun} as a number such as {example}.", field=field)
    text = format(value, "f") if isinstance(value, Decimal) and value.is_finite() else str(value)
    amount = decimal_number(text)
    shown = text.strip()[:40] + ("…" if len(text.strip()) > 40 else "")
    if amount is None:
        raise DomainError(f"“{shown}” is not {a_noun}; give a number such as {example}.", field=field)
    column_places = column.decimal_places or 0
    places = column_places if places is None else min(places, column_places)
    largest = Decimal(10 ** ((column.max_digits or 0) - column_places)) - Decimal(1).scaleb(-column_places)
    largest = min(largest, most) if most is not None else largest
    if abs(amount) > largest:
        raise DomainError(f"{the_noun}{unit} is at most {largest:,}; “{shown}” is more.", field=field)
    exponent = amount.as_tuple().exponent
    assert isinstance(exponent, int)  # decimal_number reads finite numbers only
    if -exponent > places:
        if amount != amount.quantize(Decimal(1).scaleb(-places)):
            raise DomainError(f"{the_noun}{unit} has at most {places} decimals; “{shown}” has more.",
                              field=field)
        amount = amount.quantize(Decimal(1).scaleb(-places))
    return amount
