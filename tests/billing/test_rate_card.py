"""The rate card as one value (billing.rates.card.RateCard): read once, it answers the price in
force at a moment, a flavor's prices as periods across a span, the flavors priced now and the
default currency, and every part of billing asks it instead of the rate table."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.models import Rate
from billing.rates.card import DEFAULT_CURRENCY, RateCard, RatePeriod
from billing.usage.overview import finance_overview
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def rate_reads(queries: CaptureQueriesContext) -> int:
    return sum(1 for query in queries.captured_queries if 'FROM "billing_rate"' in query["sql"])


def test_a_flavors_prices_are_periods_across_a_span_with_the_time_before_its_first_price_unpriced(flavor):
    first = rate(flavor, "2.00", effective_from=at("2026-10-10 12:00"))
    second = rate(flavor, "3.00", effective_from=at("2026-10-20 00:00"))
    rate(flavor, "4.00", effective_from=at("2026-11-05 00:00"))  # after the span: not in it

    periods = RateCard.read().periods(flavor.pk, start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00"))

    assert periods == [RatePeriod(rate=None, start=at("2026-10-01 00:00"), end=at("2026-10-10 12:00")),
                       RatePeriod(rate=first, start=at("2026-10-10 12:00"), end=at("2026-10-20 00:00")),
                       RatePeriod(rate=second, start=at("2026-10-20 00:00"), end=at("2026-11-01 00:00"))]


def test_a_span_inside_one_price_is_one_period_and_an_empty_span_has_none(flavor):
    first = rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"))
    rate(flavor, "3.00", effective_from=at("2026-10-20 00:00"))
    card = RateCard.read()

    assert card.periods(flavor.pk, start=at("2026-10-05 00:00"), end=at("2026-10-06 00:00")) == [
        RatePeriod(rate=first, start=at("2026-10-05 00:00"), end=at("2026-10-06 00:00"))]
    assert card.periods(flavor.pk, start=at("2026-10-06 00:00"), end=at("2026-10-06 00:00")) == []


def test_a_flavor_never_priced_is_one_unpriced_period_and_priced_nowhere(flavor, mig_flavor):
    rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"))
    card = RateCard.read()

    assert card.periods(mig_flavor.pk, start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00")) == [
        RatePeriod(rate=None, start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00"))]
    assert card.priced([flavor.pk, mig_flavor.pk], at("2026-10-02 00:00")) == {flavor.pk}
    assert card.priced([flavor.pk, mig_flavor.pk], at("2026-09-30 00:00")) == set()


def test_the_price_in_force_is_the_latest_started_and_whole_seconds_start_a_price_at_its_second(flavor):
    early = rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"))
    later = rate(flavor, "3.00", effective_from=at("2026-10-20 10:00:00.600000"))
    card = RateCard.read()

    assert card.rate_at(flavor.pk, at("2026-10-20 10:00:00.300000")) == early
    assert card.rate_at(flavor.pk, at("2026-10-20 10:00:00.600000")) == later
    assert card.whole_seconds().rate_at(flavor.pk, at("2026-10-20 10:00:00.300000")) == later
    assert card.in_force(at("2026-10-02 00:00")) == {flavor.pk: early}
    assert card.rate_at(flavor.pk, at("2026-09-30 23:59")) is None


def test_metering_asks_in_whole_epoch_seconds_and_gets_what_the_whole_seconds_card_answers(flavor, mig_flavor):
    early = rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"))
    later = rate(flavor, "3.00", effective_from=at("2026-10-20 10:00:00.600000"))
    card = RateCard.read()
    second = int(at("2026-10-20 10:00:00").timestamp())

    assert card.change_seconds(flavor.pk) == (int(at("2026-10-01 00:00").timestamp()), second)
    assert card.rate_at_second(flavor.pk, second) == later == card.whole_seconds().rate_at(flavor.pk, at("2026-10-20 10:00"))
    assert card.rate_at_second(flavor.pk, second - 1) == early
    # Before any price, a flavor never priced, and moments far outside any calendar: no price, no error.
    assert card.rate_at_second(flavor.pk, second - 10**9) is None
    assert card.rate_at_second(mig_flavor.pk, second) is None and card.change_seconds(mig_flavor.pk) == ()
    assert card.rate_at_second(flavor.pk, 2**63) == later and card.rate_at_second(flavor.pk, -(2**63)) is None


def test_an_hourly_cost_is_the_price_in_force_times_the_gpus_the_units_are(mig_flavor):
    rate(mig_flavor, "7.00", effective_from=at("2026-10-01 00:00"))
    card = RateCard.read()

    found = card.hourly_cost(mig_flavor, 3, at("2026-10-02 00:00"))
    assert found is not None
    assert (found.amount, found.currency, found.borrowed_amount) == (Decimal("3.00"), "USD", Decimal("3.00"))
    assert card.hourly_cost(mig_flavor, 3, at("2026-09-02 00:00")) is None


def test_the_default_currency_is_the_newest_prices_and_usd_before_any(flavor):
    assert RateCard.read().default_currency == DEFAULT_CURRENCY == "USD"
    rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"), currency="EUR")
    other = FlavorFactory.create(name="L4", slug="l4", resource_name="nvidia.com/gpu")
    rate(other, "300", effective_from=at("2026-10-05 00:00"), currency="JPY")
    assert RateCard.read().default_currency == "JPY"


def test_a_card_read_for_some_flavors_holds_only_theirs_in_one_query(flavor, mig_flavor):
    rate(flavor, "2.00", effective_from=at("2026-10-01 00:00"))
    rate(mig_flavor, "7.00", effective_from=at("2026-10-01 00:00"))
    with CaptureQueriesContext(connection) as read:
        card = RateCard.read(flavor_ids=[mig_flavor.pk])
        card.periods(mig_flavor.pk, start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00"))
        card.in_force(at("2026-10-02 00:00"))
    assert len(read) == 1
    assert card.flavor_ids() == {mig_flavor.pk} and {r.flavor_id for r in card.rates()} == {mig_flavor.pk}


def test_the_finance_overview_reads_the_rate_card_once_for_both_months(team, flavor):
    october = rate(flavor, "2.00", effective_from=at("2026-09-01 00:00"))
    usage(account=account(team), flavor=flavor, hour=at("2026-09-10 10:00"), gpu_seconds=3600, rate=october)
    usage(account=account(team), flavor=flavor, hour=at("2026-10-10 10:00"), gpu_seconds=7200, rate=october)

    with CaptureQueriesContext(connection) as read:
        found = finance_overview(month=dt.date(2026, 10, 1), now=at("2026-10-20 00:00"))

    assert (found.total.cost, found.previous_total) == (Decimal("4.00"), Decimal("2.00"))
    assert rate_reads(read) == 1  # it was one per month, and a third for the currency of an idle month


def test_the_rate_card_page_lists_and_marks_the_prices_in_force_from_one_read(as_user, finance_user, flavor):
    old = rate(flavor, "2.00", effective_from=at("2026-01-01 00:00"))
    new = rate(flavor, "3.00", effective_from=at("2026-02-01 00:00"))

    with CaptureQueriesContext(connection) as read:
        response = as_user(finance_user).get(reverse("billing:rate-card"))

    assert response.status_code == 200
    assert response.context["in_force"] == {new.pk} and list(response.context["rates"]) == [new, old]
    assert rate_reads(read) == 1
    assert Rate.objects.count() == 2
