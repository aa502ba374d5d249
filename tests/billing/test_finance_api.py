"""Finance without a browser (issue 22 §3): the overview as data, and a closed statement's CSV and
PDF fetched with an API token that can only read; the same isolation as the pages."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from billing.statements import exports
from billing.statements import selectors as statement_selectors
from billing.statements.services import statement_close
from portal import tokens
from tests.billing.factories import account, rate, usage

pytestmark = pytest.mark.django_db
UTC = dt.UTC


@pytest.fixture
def october(team, other_team, flavor, finance_user):
    price = rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=flavor, hour=dt.datetime(2026, 10, 3, 9, tzinfo=UTC), gpu_seconds=10 * 3600,
          rate=price)
    usage(account=account(other_team), flavor=flavor, hour=dt.datetime(2026, 10, 4, 9, tzinfo=UTC), gpu_seconds=7200,
          rate=price, owner="sam")
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))


def script_of(user, scope: str = "read") -> APIClient:
    _, secret = tokens.api_token_create(user=user, name="accounting export", expires_in_days=30, scope=scope)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_finance_reads_the_overview_as_data_with_cost_centers_and_totals_that_add_up(october, finance_user):
    body = script_of(finance_user).get("/api/billing/overview/", {"month": "2026-10", "sort": "team", "dir": "asc"}).json()
    assert (body["month"], body["time_zone"], body["currency"]) == ("2026-10", "UTC", "USD")
    assert [(t["team"], t["team_name"], t["cost_center"], t["gpu_hours"], t["cost"]) for t in body["teams"]] == [
        ("speech", "Speech", "CC-100", "2.00", "4.00"), ("vision", "Vision", "CC-100", "10.00", "20.00")]
    assert (body["total_cost"], body["total_gpu_hours"]) == ("24.00", "12.00")
    assert sum(Decimal(t["cost"]) for t in body["teams"]) == Decimal(body["total_cost"])
    assert body["flavors"] == [{"flavor": "h100-80gb", "flavor_name": "H100 80GB", "gpu_hours": "12.00", "cost": "24.00"}]


@pytest.mark.parametrize("role", ["member", "lead", "outsider"])
def test_the_overview_is_financial_data_only_finance_and_admins_read(october, request, role):
    assert script_of(request.getfixturevalue(role)).get("/api/billing/overview/").status_code == 403


def test_a_bad_month_or_sort_is_refused_in_words(finance_user):
    client = script_of(finance_user)
    assert "is not a month" in client.get("/api/billing/overview/", {"month": "2026-13"}).json()["message"]
    assert client.get("/api/billing/overview/", {"sort": "password"}).status_code == 400


def test_a_read_token_downloads_the_statements_csv_and_pdf_as_the_page_gives_them(october, finance_user):
    client = script_of(finance_user)
    picture = statement_selectors.statement_picture(user=finance_user, statement=october)

    as_csv = client.get("/api/billing/statements/2026-10/csv/", HTTP_ACCEPT="text/csv")
    assert as_csv.status_code == 200 and as_csv["Content-Type"] == "text/csv; charset=utf-8"
    assert as_csv["Content-Disposition"] == 'attachment; filename="statement-2026-10.csv"'
    assert as_csv.content == exports.statement_csv(picture)

    as_pdf = client.get("/api/billing/statements/2026-10/pdf/")
    assert as_pdf.status_code == 200 and as_pdf["Content-Type"] == "application/pdf"
    assert as_pdf.content.startswith(b"%PDF-")
    assert client.get("/billing/statements/2026-10/csv/").status_code == 302  # the page still wants a session


def test_a_leads_token_gets_their_teams_part_and_another_teams_is_404(october, lead, outsider):
    mine = script_of(lead).get("/api/billing/statements/2026-10/csv/", {"team": "vision"})
    assert mine.status_code == 200 and b"speech" not in mine.content and b",vision," in mine.content
    assert script_of(lead).get("/api/billing/statements/2026-10/csv/", {"team": "speech"}).status_code == 404
    assert script_of(outsider).get("/api/billing/statements/2026-10/pdf/", {"team": "vision"}).status_code == 404
    assert APIClient().get("/api/billing/statements/2026-10/csv/").status_code in (401, 403)
