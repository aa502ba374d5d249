"""Rollup rows folded into statement lines and rounded by the one rule (billing.money): each
line once, whole lines summed, parts of a line apportioned so they add up to it.

Every page, export and API answer that shows usage figures builds them here from grouped rollup
rows, so a team's month reads the same on its usage page, its budget, the finance overview and
its statement, and the lines shown under any total add up to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing import money
from billing.money import ROUNDING_HOURS

# What makes a line (with the period the rows were read for): the fields every grouped read asks
# for. A line bills its borrowed hours at its rate's discount, so its rows keep them apart.
LINE_FIELDS = ("account_id", "flavor_id", "rate_id", "rate__price_per_gpu_hour", "rate__currency",
               "rate__borrowed_discount_percent", "fraction_numerator", "fraction_denominator", "borrowed")

Line = tuple[int, int, int | None, int, int]  # account, flavor, rate, fraction numerator, denominator


@dataclass(frozen=True)
class Figure:
    """GPU-hours and cost as shown: rounded by the rule."""

    gpu_hours: Decimal
    cost: Decimal


class Lines:
    """The lines of grouped rollup rows (one period, one currency), with the parts each row
    belongs to. `rows` carry LINE_FIELDS, `unit_seconds` and whatever other fields the caller
    groups parts by; rows of one line and part add up."""

    def __init__(self, rows: Iterable[dict[str, Any]], *, currency: str) -> None:
        self.currency = currency
        self.places = money.minor_unit(currency)
        self._rows: list[tuple[Line, dict[str, Any], Fraction, Fraction]] = []
        self._hours: dict[Line, Fraction] = defaultdict(Fraction)
        self._cost: dict[Line, Fraction] = defaultdict(Fraction)
        for row in rows:
            line = (row["account_id"], row["flavor_id"], row["rate_id"], row["fraction_numerator"], row["fraction_denominator"])
            hours = money.gpu_hours(unit_seconds=row["unit_seconds"], numerator=row["fraction_numerator"],
                                    denominator=row["fraction_denominator"])
            cost = money.row_cost(row)
            self._rows.append((line, row, hours, cost))
            self._hours[line] += hours
            self._cost[line] += cost

    def __bool__(self) -> bool:
        return bool(self._rows)

    def line_cost(self, line: Line) -> Decimal:
        return money.round_places(self._cost[line], self.places)

    def line_hours(self, line: Line) -> Decimal:
        return money.round_places(self._hours[line], ROUNDING_HOURS)

    def whole(self, *fields: str) -> dict[tuple[Any, ...], Figure]:
        """Figures of whole lines grouped by fields of the line (account_id, flavor_id, rate_id):
        each the sum of its lines' rounded figures."""
        index = {"account_id": 0, "flavor_id": 1, "rate_id": 2}
        hours: dict[tuple[Any, ...], Decimal] = defaultdict(Decimal)
        cost: dict[tuple[Any, ...], Decimal] = defaultdict(Decimal)
        for line in self._hours:
            key = tuple(line[index[field]] for field in fields)
            hours[key] += self.line_hours(line)
            cost[key] += self.line_cost(line)
        return {key: Figure(gpu_hours=hours[key], cost=cost[key]) for key in hours}

    def total(self) -> Figure:
        return self.whole().get((), Figure(gpu_hours=self._zero_hours(), cost=self.zero))

    def parts(self, *fields: str) -> dict[tuple[Any, ...], Figure]:
        """Figures of the rows' values of `fields` (a person, a day, guaranteed or borrowed, or
        several): each line's rounded figures shared among its parts by their exact shares
        (money.apportion), then summed per part. Every line's parts add up to the line, so the
        parts add up to `total()`."""
        hour_shares: dict[Line, dict[tuple[Any, ...], Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        cost_shares: dict[Line, dict[tuple[Any, ...], Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        for line, row, hours, cost in self._rows:
            key = tuple(row[field] for field in fields)
            hour_shares[line][key] += hours
            cost_shares[line][key] += cost
        hours_out: dict[tuple[Any, ...], int] = defaultdict(int)
        cost_out: dict[tuple[Any, ...], int] = defaultdict(int)
        for line in hour_shares:
            shared_hours = money.apportion(money.in_minor_units(self.line_hours(line), ROUNDING_HOURS), hour_shares[line])
            shared_cost = money.apportion(money.in_minor_units(self.line_cost(line), self.places), cost_shares[line])
            for key, units in shared_hours.items():
                hours_out[key] += units
            for key, units in shared_cost.items():
                cost_out[key] += units
        return {key: Figure(gpu_hours=Decimal(hours_out[key]).scaleb(-ROUNDING_HOURS),
                            cost=Decimal(cost_out[key]).scaleb(-self.places)) for key in hours_out}

    @property
    def zero(self) -> Decimal:
        return money.round_money(0, self.currency)

    @staticmethod
    def _zero_hours() -> Decimal:
        return money.round_places(0, ROUNDING_HOURS)

