"""A team's month-to-date cost and its forecast at the current burn, from the hourly rollups only."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.models import UsageHour
from billing.usage import selectors
from billing.usage.forecast import month_forecast
from portal.errors import DomainError
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
NOV = dt.date(2026, 11, 1)
EPOCH = dt.datetime(2026, 1, 1, tzinfo=UTC)


def at(day: int, hour: int = 0, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=UTC)


def hourly(acc, flavor, r, start: dt.datetime, hours: int, gpus: int = 1) -> None:
    UsageHour.objects.bulk_create([
        UsageHour(hour=start + dt.timedelta(hours=i), account=acc, flavor=flavor, owner_username="alice", rate=r,
                  fraction_numerator=flavor.fraction_numerator, fraction_denominator=flavor.fraction_denominator,
                  unit_seconds=3600 * gpus)
        for i in range(hours)])


def test_month_cost_sums_every_flavor_at_its_rate_and_nothing_else(team, other_team, flavor, mig_flavor,
                                                                  django_assert_num_queries):
    acc, other = account(team), account(other_team)
    h100, mig = rate(flavor, "2.50", effective_from=EPOCH), rate(mig_flavor, "7.00", effective_from=EPOCH)
    usage(account=acc, flavor=flavor, hour=at(3, 10), gpu_seconds=3 * 3600, rate=h100)   # 3 GPU-h × 2.50
    usage(account=acc, flavor=mig_flavor, hour=at(3, 10), unit_seconds=3600, rate=mig)   # 1/7 GPU-h × 7.00
    usage(account=acc, flavor=flavor, hour=at(31, 23, month=10), gpu_seconds=3600, rate=h100)  # October
    usage(account=acc, flavor=flavor, hour=at(1, 0, month=12), gpu_seconds=3600, rate=h100)    # December
    usage(account=other, flavor=flavor, hour=at(3, 10), gpu_seconds=3600 * 100, rate=h100)     # another team
    usage(account=acc, flavor=flavor, hour=at(4, 10), gpu_seconds=3600 * 100, rate=None, owner="bob")  # unpriced
    with django_assert_num_queries(1):
        assert selectors.team_month_cost(account=acc, month=NOV) == (Decimal("8.50"), "USD")
    assert selectors.team_month_cost(account=acc, month=dt.date(2026, 11, 17)) == (Decimal("8.50"), "USD")


def test_month_cost_is_rounded_once_per_flavor_and_rate_line_half_even_as_a_statement_is(team):
    acc = account(team)
    a, b = FlavorFactory.create(slug="a"), FlavorFactory.create(slug="b")
    ra, rb = rate(a, "0.0050", effective_from=EPOCH), rate(b, "0.0050", effective_from=EPOCH)
    # Each line is 0.005 exactly: half-even makes each 0.00, so the total is 0.00, not the 0.01 of the exact sum.
    usage(account=acc, flavor=a, hour=at(2, 1), gpu_seconds=1800, rate=ra)
    usage(account=acc, flavor=a, hour=at(2, 2), gpu_seconds=1800, rate=ra)
    usage(account=acc, flavor=b, hour=at(2, 1), gpu_seconds=3600, rate=rb)
    assert selectors.team_month_cost(account=acc, month=NOV) == (Decimal("0.00"), "USD")
    # A price change mid-month is a line of its own.
    rb2 = rate(b, "0.0150", effective_from=at(10))
    usage(account=acc, flavor=b, hour=at(10, 1), gpu_seconds=3600, rate=rb2)
    assert selectors.team_month_cost(account=acc, month=NOV) == (Decimal("0.02"), "USD")


def test_an_idle_team_costs_zero_in_the_card_currency(team, flavor):
    rate(flavor, "100", effective_from=EPOCH, currency="JPY")
    assert selectors.team_month_cost(account=account(team), month=NOV) == (Decimal("0"), "JPY")


def test_usage_priced_in_two_currencies_is_refused_with_a_sentence(team, flavor, mig_flavor):
    acc = account(team)
    usage(account=acc, flavor=flavor, hour=at(2), gpu_seconds=60, rate=rate(flavor, "1", effective_from=EPOCH))
    usage(account=acc, flavor=mig_flavor, hour=at(2), unit_seconds=60,
          rate=rate(mig_flavor, "1", effective_from=EPOCH, currency="EUR"))
    with pytest.raises(DomainError, match="priced in EUR and USD; a month is billed in one currency"):
        selectors.team_month_cost(account=acc, month=NOV)


def test_forecast_projects_the_current_burn_to_month_end_and_dates_the_budget_crossings(team, flavor,
                                                                                      django_assert_num_queries):
    acc = account(team)
    hourly(acc, flavor, rate(flavor, "1.00", effective_from=EPOCH), at(1), 240)  # Nov 1–10, one GPU at 1.00
    with django_assert_num_queries(2):
        forecast = month_forecast(account=acc, month=NOV, now=at(11))
    assert (forecast.spent, forecast.currency, forecast.burn_per_hour) == (Decimal("240.00"), "USD", Decimal("1.00"))
    assert forecast.projected == Decimal("720.00")  # 240 + 1.00 × 20 days × 24 h
    assert forecast.crossing_date(Decimal("500")) == dt.date(2026, 11, 21)  # 260 more hours: Nov 21, 20:00
    assert forecast.crossing_date(Decimal("100")) == dt.date(2026, 11, 5)   # already crossed, on day 5 (120)
    assert forecast.crossing_date(Decimal("721")) is None


def test_forecast_follows_the_last_day_not_the_month_average(team, flavor):
    acc = account(team)
    hourly(acc, flavor, rate(flavor, "1.00", effective_from=EPOCH), at(10), 24, gpus=4)  # only Nov 10, 4 GPUs
    forecast = month_forecast(account=acc, month=NOV, now=at(11))
    assert forecast.spent == Decimal("96.00")
    assert forecast.burn_per_hour == Decimal("4.00")
    assert forecast.projected == Decimal("2016.00")  # 96 + 4 × 480 h


def test_a_month_not_yet_ended_ignores_rows_after_now_and_a_past_month_projects_what_it_spent(team, flavor):
    acc = account(team)
    r = rate(flavor, "2.00", effective_from=EPOCH)
    hourly(acc, flavor, r, at(1, month=10), 31 * 24)
    past = month_forecast(account=acc, month=dt.date(2026, 10, 1), now=at(11))
    assert past.spent == past.projected == Decimal("1488.00")
    assert past.crossing_date(Decimal("2000")) is None
    future = month_forecast(account=acc, month=dt.date(2026, 12, 1), now=at(11))
    assert future.spent == future.projected == Decimal("0.00")


def test_months_are_local_months_of_the_billing_zone(settings, team, flavor):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    acc = account(team)
    r = rate(flavor, "1.00", effective_from=EPOCH)
    usage(account=acc, flavor=flavor, hour=at(31, 23, month=10), gpu_seconds=3600, rate=r)  # Nov 1, 00:00 in Berlin
    usage(account=acc, flavor=flavor, hour=at(30, 23), gpu_seconds=7200, rate=r)            # Dec 1, 00:00 in Berlin
    assert selectors.team_month_cost(account=acc, month=NOV) == (Decimal("1.00"), "USD")
    assert selectors.team_month_cost(account=acc, month=dt.date(2026, 12, 1)) == (Decimal("2.00"), "USD")


