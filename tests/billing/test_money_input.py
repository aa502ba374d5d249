"""Money a person or a script types is read only if its column can keep it (issue 22, §6 and §7).

Every money input (a price on the rate card page, through the API and in the Django admin; a
budget on its page and through the API; an adjustment on its page and through the API) is read by
billing.money.money_input: ASCII digits only, within its column's digits and decimals. A price of
1e6 was a 500 on PostgreSQL (numeric(10, 4) overflows), "１２" was read as 12, and a rate the
service refused in the Django admin said "added successfully". Run on PostgreSQL, where the
overflow showed."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from billing.models import Adjustment, Budget, Rate
from billing.money import money_input
from billing.statements.services import statement_close
from portal.errors import DomainError
from portal.models import AuditEvent
from tests.billing.factories import account, rate, usage
from tests.conftest import login
from tests.helpers import api

pytestmark = pytest.mark.django_db

UTC = dt.UTC

# What no money input reads, whatever its column: digits that are not ASCII, words for numbers
# that are none, separators that are no grouping of thousands.
NOT_NUMBERS = ["１２", "١٢", "NaN", "Infinity", "-Infinity", "1_000", "2,75", "0x10", "12 500", "1.2.3", "e6", "²"]

PRICE_REFUSALS = {
    **{text: f"“{text}” is not a price; give a number such as 2.75." for text in NOT_NUMBERS},
    "1e6": "A price per GPU-hour is at most 999,999.9999; “1e6” is more.",
    "1000000": "A price per GPU-hour is at most 999,999.9999; “1000000” is more.",
    "123456789012": "A price per GPU-hour is at most 999,999.9999; “123456789012” is more.",
    "2.12345": "A price per GPU-hour has at most 4 decimals; “2.12345” has more.",
    "-1": "A price per GPU-hour is zero or more.",
}
BUDGET_REFUSALS = {
    **{text: f"“{text}” is not an amount; give a number such as 10000 or 12500.50." for text in NOT_NUMBERS},
    "1e12": "An amount for a budget is at most 999,999,999,999.99; “1e12” is more.",
    "1234567890123": "An amount for a budget is at most 999,999,999,999.99; “1234567890123” is more.",
    "10.001": "An amount for a budget has at most 2 decimals; “10.001” has more.",
    "-5": "A budget is more than zero",
}
ADJUSTMENT_REFUSALS = {
    **{text: f"“{text}” is not an amount; give a number such as -120.50 (negative for a credit)." for text in NOT_NUMBERS},
    "1e17": "An amount in USD is at most 999,999,999,999,999.99; “1e17” is more.",
    "123456789012345678": "An amount in USD is at most 999,999,999,999,999.99; “123456789012345678” is more.",
    "1.005": "An amount in USD has at most 2 decimals; “1.005” has more.",
    "0": "An adjustment of zero changes nothing",
}


@pytest.fixture(autouse=True)
def _postgresql():
    if connection.vendor != "postgresql":
        pytest.fail("These tests need PostgreSQL: run them through scripts/with-services.sh (as `make test` does)")


def sentence(response: Any) -> str:
    return response.json()["message"] if response["Content-Type"].startswith("application/json") else (
        response.content.decode().replace("&#x27;", "'"))


# --- Prices ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("price", "words"), PRICE_REFUSALS.items(), ids=range(len(PRICE_REFUSALS)))
def test_a_price_the_rate_card_page_cannot_keep_is_refused_in_words_and_nothing_is_stored(finance_user, flavor, price,
                                                                                        words):
    response = login(finance_user).post(reverse("billing:rate-card"),
                                        {"flavor": flavor.slug, "price_per_gpu_hour": price, "currency": "USD"})

    assert response.status_code == 400
    assert words in sentence(response)
    assert not Rate.objects.exists()


@pytest.mark.parametrize(("price", "words"), PRICE_REFUSALS.items(), ids=range(len(PRICE_REFUSALS)))
def test_a_price_the_api_cannot_keep_is_a_400_in_words_and_nothing_is_stored(finance_user, flavor, price, words):
    response = api(finance_user).post("/api/billing/rates/", {"flavor": flavor.slug, "price_per_gpu_hour": price},
                                      format="json")

    assert response.status_code == 400
    assert response.json()["message"] == words or words in response.json()["message"]
    assert not Rate.objects.exists()


@pytest.mark.parametrize("price", ["1e6", "1e300", "123456789012", "2.12345", "-1", "NaN", "Infinity"])
def test_a_price_sent_as_a_json_number_is_bounded_the_same_way(finance_user, flavor, price):
    response = api(finance_user).post("/api/billing/rates/", f'{{"flavor": "{flavor.slug}", "price_per_gpu_hour": {price}}}',
                                      content_type="application/json")

    assert response.status_code == 400
    assert response.json()["message"]
    assert not Rate.objects.exists()


def admin_rate_form(flavor: Any, price: str, *, at: dt.datetime | None = None) -> dict[str, str]:
    at = timezone.localtime(at or timezone.now() + dt.timedelta(hours=1))
    return {"flavor": str(flavor.pk), "price_per_gpu_hour": price, "currency": "USD", "note": "",
            "effective_from_0": f"{at:%Y-%m-%d}", "effective_from_1": f"{at:%H:%M:%S}"}


@pytest.mark.parametrize(("price", "words"), PRICE_REFUSALS.items(), ids=range(len(PRICE_REFUSALS)))
def test_a_price_the_django_admin_cannot_keep_is_a_form_error_in_words_and_nothing_is_stored(admin_user, flavor, price,
                                                                                           words):
    response = login(admin_user).post(reverse("admin:billing_rate_add"), admin_rate_form(flavor, price))

    assert response.status_code == 200  # the form again, with its error
    assert "errornote" in response.content.decode()
    assert words in sentence(response)
    assert "added successfully" not in sentence(response)
    assert not Rate.objects.exists()


def test_a_rate_the_service_refuses_in_the_django_admin_is_a_form_error_not_added_successfully(admin_user, flavor):
    client = login(admin_user)

    response = client.post(reverse("admin:billing_rate_add"),
                           admin_rate_form(flavor, "2.75", at=timezone.now() - dt.timedelta(days=3)), follow=True)

    page = sentence(response)
    assert response.status_code == 200
    assert "A rate cannot start in the past: hours already used keep the price they had." in page
    assert "added successfully" not in page
    assert 'value="2.75"' in page  # what was typed is kept
    assert not Rate.objects.exists() and not AuditEvent.objects.filter(action="rate.set").exists()


def test_a_rate_added_in_the_django_admin_goes_through_the_service(admin_user, flavor):
    response = login(admin_user).post(reverse("admin:billing_rate_add"), admin_rate_form(flavor, "3.50"), follow=True)

    assert "added successfully" in sentence(response)
    created = Rate.objects.get()
    assert (created.price_per_gpu_hour, created.created_by) == (Decimal("3.50"), admin_user)
    assert AuditEvent.objects.filter(action="rate.set", message__contains="3.50 USD per GPU-hour").exists()


# --- Budgets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("amount", "words"), BUDGET_REFUSALS.items(), ids=range(len(BUDGET_REFUSALS)))
def test_a_budget_its_page_cannot_keep_is_refused_in_words_and_nothing_is_stored(finance_user, team, amount, words):
    response = login(finance_user).post("/billing/budgets/vision/", {"amount": amount, "currency": "USD"})

    assert response.status_code == 400
    assert words in sentence(response)
    assert not Budget.objects.exists()


@pytest.mark.parametrize(("amount", "words"), BUDGET_REFUSALS.items(), ids=range(len(BUDGET_REFUSALS)))
def test_a_budget_the_api_cannot_keep_is_a_400_in_words_and_nothing_is_stored(finance_user, team, amount, words):
    response = api(finance_user).put("/api/billing/budgets/vision/", {"amount": amount, "currency": "USD"}, format="json")

    assert response.status_code == 400
    assert words in response.json()["message"]
    assert not Budget.objects.exists()


def test_the_largest_budget_its_column_holds_is_kept(finance_user, team):
    response = api(finance_user).put("/api/billing/budgets/vision/", {"amount": "999,999,999,999.99"}, format="json")

    assert response.status_code == 200, response.content
    assert Budget.objects.get().amount == Decimal("999999999999.99")


# --- Adjustments -------------------------------------------------------------------------------


@pytest.fixture
def october(finance_user, team, flavor):
    price = rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=flavor, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=3600, rate=price)
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))


@pytest.mark.parametrize(("amount", "words"), ADJUSTMENT_REFUSALS.items(), ids=range(len(ADJUSTMENT_REFUSALS)))
def test_an_adjustment_its_page_cannot_keep_is_refused_in_words_and_nothing_is_stored(october, finance_user, amount,
                                                                                    words):
    response = login(finance_user).post(reverse("billing:adjustment-add", args=["2026-10"]),
                                        {"team": "vision", "amount": amount, "reason": "GPU 3 was broken"})

    assert response.status_code == 400
    assert words in sentence(response)
    assert not Adjustment.objects.exists()


@pytest.mark.parametrize(("amount", "words"), ADJUSTMENT_REFUSALS.items(), ids=range(len(ADJUSTMENT_REFUSALS)))
def test_an_adjustment_the_api_cannot_keep_is_a_400_in_words_and_nothing_is_stored(october, finance_user, amount, words):
    response = api(finance_user).post("/api/billing/statements/2026-10/adjustments/",
                                      {"team": "vision", "amount": amount, "reason": "GPU 3 was broken"}, format="json")

    assert response.status_code == 400
    assert words in response.json()["message"]
    assert not Adjustment.objects.exists()


# --- The one reader ----------------------------------------------------------------------------


PRICE_COLUMN = Rate._meta.get_field("price_per_gpu_hour")


@pytest.mark.parametrize(("given", "read"), [
    ("2.75", Decimal("2.75")), ("12,500.5", Decimal("12500.5")), (" 0.0001 ", Decimal("0.0001")), ("2.750000", Decimal("2.7500")),
    ("999999.9999", Decimal("999999.9999")), (3, Decimal(3)), (Decimal("2.5"), Decimal("2.5")), (2.25, Decimal("2.25")),
    ("1e2", Decimal("100")), (".5", Decimal("0.5")),
])
def test_money_in_ascii_digits_within_its_column_is_read_as_written(given, read):
    assert money_input(given, column=PRICE_COLUMN, field="price", noun="price", example="2.75") == read


@pytest.mark.parametrize("given", [None, "", "  ", True, False, [1], {"a": 1}, "1" * 2000])
def test_what_is_no_money_at_all_is_refused_naming_the_field(given):
    with pytest.raises(DomainError) as refused:
        money_input(given, column=PRICE_COLUMN, field="price", noun="price", example="2.75")
    assert refused.value.field == "price"
    assert "price" in refused.value.message
