"""Budget pages, fragments and API: members, leads, finance and admins see a team's budget;
another team's is 404 everywhere; only finance and platform admins set one; refusals in words."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import periods
from billing.budgets import selectors as budget_selectors
from billing.budgets import services as budgets
from billing.models import Budget, BudgetAlert
from tests.billing.budget_helpers import priced, use
from tests.conftest import login
from tests.factories import TeamFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db


@pytest.fixture
def budget(team, lead, member, finance_user, flavor):
    priced(flavor)
    use(team, flavor, gpu_hours=30, at=periods.hour_floor(timezone.now()))  # 300 USD
    return budgets.budget_set(actor=finance_user, team=team, amount="1000", currency="USD")


PAGES = ["/billing/budgets/vision/", "/billing/budgets/vision/bar/"]


@pytest.mark.parametrize("who", ["member", "lead", "finance_user", "admin_user"])
def test_the_team_and_finance_and_admins_see_the_budget_and_its_bar(budget, who, request):
    client = login(request.getfixturevalue(who))
    for url in PAGES:
        response = client.get(url)
        assert response.status_code == 200, url
        assert "300.00 USD of 1,000.00 USD used in" in response.content.decode()
    assert "vision" in client.get("/billing/budgets/").content.decode()


def test_another_team_gets_404_on_every_budget_page_fragment_and_endpoint(budget, outsider):
    client = login(outsider)
    for url in PAGES:
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"amount": "5"}).status_code in (404, 405), url
    assert "vision" not in client.get("/billing/budgets/").content.decode()
    assert api(outsider).get("/api/billing/budgets/vision/").status_code == 404
    assert api(outsider).put("/api/billing/budgets/vision/", {"amount": "1"}, format="json").status_code == 404
    assert api(outsider).get("/api/billing/budgets/").json()["results"] == []
    BudgetAlert.objects.create(account=budget.account, month=dt.date(2026, 11, 1), threshold="50", spent=500,
                               budget_amount=1000, currency="USD", message="vision has spent 500.00 USD")
    assert api(outsider).get("/api/billing/budget-alerts/").json()["results"] == []
    assert api(outsider).get("/api/billing/budget-alerts/?team=vision").json()["results"] == []
    assert Budget.objects.get().amount == 1000


def test_a_lead_sees_the_budget_but_may_not_set_it(budget, lead):
    page = login(lead).get("/billing/budgets/vision/").content.decode()
    assert 'name="amount"' not in page
    assert login(lead).post("/billing/budgets/vision/", {"amount": "5000", "currency": "USD"}).status_code == 403
    response = api(lead).put("/api/billing/budgets/vision/", {"amount": "5000"}, format="json")
    assert response.status_code == 403
    assert Budget.objects.get().amount == 1000
    assert len(api(lead).get("/api/billing/budgets/").json()["results"]) == 1


def test_finance_sets_a_budget_on_the_page_with_htmx_and_sees_the_bar(team, lead, finance_user, flavor):
    client = login(finance_user)
    assert 'name="amount"' in client.get("/billing/budgets/vision/").content.decode()
    response = client.post("/billing/budgets/vision/", {"amount": "2,500", "currency": "eur", "hard_stop": "on"},
                           HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and 'id="budget-panel"' in body and "<html" not in body
    assert "The budget of vision is now 2,500.00 EUR a month with a hard stop." in body
    assert "0.00 EUR of 2,500.00 EUR used in" in body
    budget = Budget.objects.get()
    assert (str(budget.amount), budget.currency, budget.hard_stop) == ("2500.00", "EUR", True)


def test_a_hard_stop_below_what_is_spent_asks_first_and_holds_only_once_confirmed(budget, finance_user):
    # 300 USD spent this month: a hard stop at 250 would hold the team at once.
    client = login(finance_user)
    asked = client.post("/billing/budgets/vision/", {"amount": "250", "currency": "USD", "hard_stop": "on"},
                        HTTP_HX_REQUEST="true")
    body = asked.content.decode()
    assert asked.status_code == 200 and 'data-testid="hold-confirm"' in body
    assert "This holds vision at once." in body and "300.00 USD of 250.00 USD used in" in body
    assert (Budget.objects.get().amount, Budget.objects.get().held) == (Decimal(1000), False)  # nothing changed yet

    confirmed = client.post("/billing/budgets/vision/", {"amount": "250", "currency": "USD", "hard_stop": "on",
                                                         "hold_confirmed": "1"}, HTTP_HX_REQUEST="true")
    assert "The budget of vision is now 250.00 USD a month with a hard stop." in confirmed.content.decode()
    assert (Budget.objects.get().amount, Budget.objects.get().held) == (Decimal(250), True)

    above = client.post("/billing/budgets/vision/", {"amount": "400", "currency": "USD", "hard_stop": "on"},
                        HTTP_HX_REQUEST="true")  # above what is spent: no question
    assert "hold-confirm" not in above.content.decode() and Budget.objects.get().amount == 400


def test_a_bad_amount_on_the_page_is_a_form_error_in_words_and_writes_nothing(team, finance_user):
    client = login(finance_user)
    response = client.post("/billing/budgets/vision/", {"amount": "lots", "currency": "USD"})
    assert response.status_code == 400
    assert "“lots” is not an amount; give a number such as 10000 or 12500.50." in response.content.decode()
    htmx = client.post("/billing/budgets/vision/", {"amount": "-3", "currency": "USD"}, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 200 and "A budget is more than zero" in htmx.content.decode()
    assert not Budget.objects.exists()


def test_the_api_lists_sets_and_refuses_in_words(team, finance_user, admin_user, flavor):
    priced(flavor)
    response = api(admin_user).put("/api/billing/budgets/vision/", {"amount": "1000", "hard_stop": True}, format="json")
    assert response.status_code == 200
    data = response.json()
    assert {k: data[k] for k in ("team", "amount", "currency", "hard_stop", "held", "spent", "percent", "set_by")} == {
        "team": "vision", "amount": "1000.00", "currency": "USD", "hard_stop": True, "held": False, "spent": "0.00",
        "percent": 0, "set_by": "root"}
    assert data["forecast_sentence"] == "Nothing spent yet this month."
    refused = api(finance_user).put("/api/billing/budgets/vision/", {"amount": "1.5e", "currency": "USD"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["message"] == "“1.5e” is not an amount; give a number such as 10000 or 12500.50."
    unknown = api(finance_user).put("/api/billing/budgets/vision/", {"amount": "10", "limit": "x"}, format="json")
    assert unknown.status_code == 400
    assert api(finance_user).get("/api/billing/budgets/").json()["results"][0]["amount"] == "1000.00"
    assert api(finance_user).get("/api/billing/budgets/nobody/").status_code == 404
    assert api(finance_user).put("/api/billing/budgets/nobody/", {"amount": "10"}, format="json").status_code == 404


def test_the_budget_endpoints_are_in_the_openapi_schema(admin_user):
    schema = api(admin_user).get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/billing/budgets/", "/api/billing/budgets/{team}/", "/api/billing/budget-alerts/"):
        assert path in schema


def test_a_person_chooses_the_daily_digest_from_the_notifications_page(lead):
    client = login(lead)
    assert "/billing/alert-emails/" in client.get("/notifications/").content.decode()
    fragment = client.get("/billing/alert-emails/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="alert-email"' in fragment and "checked" not in fragment
    response = client.post("/billing/alert-emails/", {"daily_digest": "on"}, HTTP_HX_REQUEST="true")
    assert "Budget alerts now come in one email a day." in response.content.decode()
    assert budget_selectors.alert_email_digest(user=lead)
    client.post("/billing/alert-emails/", {})
    assert not budget_selectors.alert_email_digest(user=lead)


def test_a_team_without_a_budget_says_so_and_offers_finance_the_form(team, member, finance_user):
    assert "vision has no budget" in login(member).get("/billing/budgets/vision/bar/").content.decode()
    assert "Set a budget for vision" in login(finance_user).get("/billing/budgets/").content.decode()


def test_the_budget_list_and_api_cost_the_same_queries_for_two_budgets_or_eight(budget, finance_user, flavor):
    def queries() -> tuple[int, int]:
        client = login(finance_user)
        client.get("/billing/")  # the session is saved once, on the first request
        with CaptureQueriesContext(connection) as page:
            response = client.get("/billing/budgets/")
            assert response.status_code == 200
        with CaptureQueriesContext(connection) as listed:
            answer = api(finance_user).get("/api/billing/budgets/")
            assert answer.status_code == 200
        html = response.content.decode()
        assert answer.json()["count"] == Budget.objects.count()
        assert all(f"{budget.account.slug}</" in html for budget in Budget.objects.select_related("account"))
        return len(page), len(listed)

    def another(number: int) -> None:
        team = TeamFactory.create(slug=f"team-{number}", name=f"Team {number}")
        use(team, flavor, gpu_hours=number, at=periods.hour_floor(timezone.now()))
        budgets.budget_set(actor=finance_user, team=team, amount="1000", currency="USD")

    another(1)
    few = queries()
    for number in range(2, 8):
        another(number)
    assert queries() == few
