"""Exact quantities and money.

GPU-seconds and amounts are `Fraction`s until a statement line is written: an amount is rounded
once per line, half-even, to the currency's minor unit, and a total is the sum of rounded lines.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

# ISO 4217 minor units that are not 2; every other three-letter code has cents.
_MINOR_UNITS = {"BHD": 3, "CLP": 0, "IQD": 3, "ISK": 0, "JOD": 3, "JPY": 0, "KRW": 0, "KWD": 3, "LYD": 3, "OMR": 3,
                "PYG": 0, "TND": 3, "UGX": 0, "VND": 0, "XAF": 0, "XOF": 0, "XPF": 0}
SECONDS_PER_HOUR = 3600


def minor_unit(currency: str) -> int:
    """Digits after the decimal point in the currency's smallest coin (2 for USD and EUR, 0 for JPY)."""
    return _MINOR_UNITS.get(currency.upper(), 2)


def gpu_seconds(*, unit_seconds: int, numerator: int, denominator: int) -> Fraction:
    return Fraction(unit_seconds * numerator, denominator)


def gpu_hours(*, unit_seconds: int, numerator: int, denominator: int) -> Fraction:
    return gpu_seconds(unit_seconds=unit_seconds, numerator=numerator, denominator=denominator) / SECONDS_PER_HOUR


def cost(*, unit_seconds: int, numerator: int, denominator: int, price_per_gpu_hour: Decimal) -> Fraction:
    """The exact, unrounded cost of the usage at a price per physical GPU-hour."""
    return gpu_hours(unit_seconds=unit_seconds, numerator=numerator, denominator=denominator) * Fraction(price_per_gpu_hour)


def round_money(value: Fraction | Decimal | int, currency: str) -> Decimal:
    """Rounded half-even to the currency's minor unit: done once per statement line."""
    return round_places(value, minor_unit(currency))


def round_places(value: Fraction | Decimal | int, places: int) -> Decimal:
    """Exactly rounded half-even to `places` decimals (Fraction's round() is half-even)."""
    scaled = round(Fraction(value) * 10**places)
    return Decimal(scaled).scaleb(-places)
