"""Billing periods in the billing zone and exact money: the ground every statement stands on."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest

from billing import money, periods

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(("zone", "day", "hours"), [
    ("UTC", dt.date(2026, 3, 29), 24),
    ("Europe/Berlin", dt.date(2026, 3, 29), 23),   # clocks go forward
    ("Europe/Berlin", dt.date(2026, 10, 25), 25),  # clocks go back
    ("America/New_York", dt.date(2026, 11, 1), 25),
    ("Asia/Kolkata", dt.date(2026, 3, 29), 24),
])
def test_a_local_day_has_as_many_hours_as_its_clock(settings, zone, day, hours):
    settings.BILLING_TIME_ZONE = zone
    start, end = periods.day_bounds(day)
    assert (end - start) == dt.timedelta(hours=hours)
    assert len(list(periods.hour_starts(start, end))) == hours
    assert sum(seconds for _, seconds in periods.split_by_hour(start, end)) == hours * 3600


def test_a_month_is_the_local_calendar_month(settings):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    start, end = periods.month_bounds(dt.date(2026, 10, 17))
    assert start == at("2026-09-30T22:00:00+00:00")
    assert end == at("2026-10-31T23:00:00+00:00")
    assert periods.next_month(dt.date(2026, 12, 1)) == dt.date(2027, 1, 1)
    assert periods.current_month(at("2026-10-31T23:30:00+00:00")) == dt.date(2026, 11, 1)


def test_hours_in_a_half_hour_zone_start_at_the_local_hour(settings):
    settings.BILLING_TIME_ZONE = "Asia/Kolkata"
    hours = list(periods.hour_starts(at("2026-01-01T00:10:00+00:00"), at("2026-01-01T01:40:00+00:00")))
    assert hours == [at("2025-12-31T23:30:00+00:00"), at("2026-01-01T00:30:00+00:00"), at("2026-01-01T01:30:00+00:00")]


def test_an_interval_across_midnight_and_month_end_is_split_and_each_second_counted_once(settings):
    settings.BILLING_TIME_ZONE = "UTC"
    parts = list(periods.split_by_hour(at("2026-10-31T23:59:50+00:00"), at("2026-11-01T01:00:05+00:00")))
    assert parts == [(at("2026-10-31T23:00:00+00:00"), 10), (at("2026-11-01T00:00:00+00:00"), 3600),
                     (at("2026-11-01T01:00:00+00:00"), 5)]
    # Two intervals that meet at an instant share no second, even with sub-second ends.
    first = sum(s for _, s in periods.split_by_hour(at("2026-11-01T00:00:00.900+00:00"), at("2026-11-01T00:00:10.400+00:00")))
    second = sum(s for _, s in periods.split_by_hour(at("2026-11-01T00:00:10.400+00:00"), at("2026-11-01T00:00:20+00:00")))
    assert first + second == 20
    assert list(periods.split_by_hour(at("2026-11-01T00:00:10+00:00"), at("2026-11-01T00:00:10+00:00"))) == []


def test_the_hour_the_clocks_go_back_is_two_rows(settings):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    parts = list(periods.split_by_hour(at("2026-10-25T00:30:00+00:00"), at("2026-10-25T01:30:00+00:00")))
    # 02:30 CEST → 02:30 CET: the local 02:00 hour happens twice, as two different instants.
    assert parts == [(at("2026-10-25T00:00:00+00:00"), 1800), (at("2026-10-25T01:00:00+00:00"), 1800)]


def test_a_mig_slice_is_exact_where_decimals_are_not():
    seconds = money.gpu_seconds(unit_seconds=7 * 3600, numerator=1, denominator=7)
    assert seconds == 3600
    assert money.gpu_hours(unit_seconds=3600, numerator=1, denominator=7) == Fraction(1, 7)
    assert money.cost(unit_seconds=3 * 3600, numerator=1, denominator=4, price_per_gpu_hour=Decimal("2.00")) == Fraction(3, 2)


@pytest.mark.parametrize(("value", "currency", "expected"), [
    (Fraction(5, 1000), "USD", Decimal("0.00")),   # half to even: down
    (Fraction(15, 1000), "USD", Decimal("0.02")),  # half to even: up
    (Fraction(1, 7), "USD", Decimal("0.14")),
    (Fraction(5, 2), "JPY", Decimal("2")),
    (Fraction(7, 2), "JPY", Decimal("4")),
    (Fraction(12345, 10000), "KWD", Decimal("1.234")),
    (Fraction(-15, 1000), "USD", Decimal("-0.02")),
])
def test_money_rounds_half_even_to_the_minor_unit(value, currency, expected):
    rounded = money.round_money(value, currency)
    assert rounded == expected
    assert rounded.as_tuple().exponent == -money.minor_unit(currency)


@pytest.mark.parametrize(("text", "month"), [
    ("2026-11", dt.date(2026, 11, 1)), (" 2026-01 ", dt.date(2026, 1, 1)),
    ("2026-13", None), ("2026-00", None), ("1999-12", None), ("2026-1", None), ("26-11", None), ("", None), ("2026-１１", None),
    ("2999-12", dt.date(2999, 12, 1)), ("3000-01", None), ("9999-12", None),  # the month after 9999-12 is no date
])
def test_a_month_is_written_yyyy_mm(text, month):
    assert periods.month_parse(text) == month


def test_a_line_costed_in_integers_rounds_exactly_as_its_exact_sum_does():
    import random
    from fractions import Fraction

    from billing.money import cost, round_money, rounded_cost

    draw = random.Random(7)
    Case = tuple[dict[tuple[int, int, bool], int], Decimal, str, Decimal | int]
    cases: list[Case] = [({(1, 1, False): 18}, Decimal("1.00"), "USD", 0),  # 0.005: half-even
                         ({(1, 1, False): 54}, Decimal("1.00"), "USD", 0),  # 0.015
             ({(1, 7, False): 3600, (1, 1, True): 1800}, Decimal("2.50"), "JPY", 0),
             ({(1, 1, True): 3600}, Decimal("2.00"), "USD", Decimal("30")),  # 1.40
             ({(1, 1, False): 3600, (1, 1, True): 3600}, Decimal("2.00"), "USD", Decimal("100"))]  # borrowed free: 2.00
    cases += [({(draw.randint(1, 3), draw.choice([1, 2, 4, 7]), draw.random() < 0.5): draw.randint(0, 10**7)
                for _ in range(draw.randint(1, 4))},
               Decimal(draw.randint(0, 100_000)).scaleb(-draw.randint(0, 4)), draw.choice(["USD", "JPY", "KWD"]),
               draw.choice([Decimal(0), Decimal("12.5"), Decimal("33.33"), Decimal(draw.randint(0, 10_000)).scaleb(-2)]))
              for _ in range(500)]
    for parts, price, currency, discount in cases:
        exact = sum((cost(unit_seconds=seconds, numerator=n, denominator=d, price_per_gpu_hour=price, borrowed=borrowed,
                          discount_percent=discount)
                     for (n, d, borrowed), seconds in parts.items()), Fraction(0))
        assert rounded_cost(parts=parts, price_per_gpu_hour=price, currency=currency,
                            discount_percent=discount) == round_money(exact, currency), (parts, price, discount)
    assert rounded_cost(parts={(1, 1, True): 3600}, price_per_gpu_hour=Decimal("2.00"), currency="USD",
                        discount_percent=Decimal(30)) == Decimal("1.40")


def test_an_integer_ratio_rounds_half_even_as_a_fraction_does():
    import random
    from fractions import Fraction

    from billing.money import round_places, round_ratio

    draw = random.Random(11)
    cases = [(5, 1000, 2), (15, 1000, 2), (-5, 1000, 2), (-15, 1000, 2), (1, 3, 0), (0, 7, 1)]
    cases += [(draw.randint(-10**9, 10**9), draw.randint(1, 10**6), draw.randint(0, 4)) for _ in range(2000)]
    for numerator, denominator, places in cases:
        assert round_ratio(numerator, denominator, places) == round_places(Fraction(numerator, denominator), places), \
            (numerator, denominator, places)


def test_the_overview_change_is_the_exact_percentage_rounded_to_a_tenth():
    import random
    from fractions import Fraction

    from billing.money import round_places
    from billing.usage.overview import percent_change

    draw = random.Random(3)
    assert percent_change(Decimal("0.00"), Decimal("12.00")) is None
    assert percent_change(Decimal("100.00"), Decimal("100.05")) == Decimal("0.0")  # 0.05 %: half-even to 0.0
    assert percent_change(Decimal("100.00"), Decimal("100.15")) == Decimal("0.2")  # 0.15 %: half-even up
    assert percent_change(Decimal("10.00"), Decimal("5.00")) == Decimal("-50.0")
    for _ in range(2000):
        was = Decimal(draw.randint(-10**6, 10**6)).scaleb(-draw.choice([0, 2, 3]))
        now = Decimal(draw.randint(0, 10**6)).scaleb(-draw.choice([0, 2, 3]))
        expected = round_places((Fraction(now) - Fraction(was)) / Fraction(was) * 100, 1) if was else None
        assert percent_change(was, now) == expected, (was, now)
