"""The statement API: finance closes, reads and adjusts; a lead reads their team's part only;
another team's statement or part is 404; bad input is a 400 with a sentence; the schema documents it."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from billing.models import Adjustment, Statement
from billing.statements.services import statement_close
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db

UTC = dt.UTC
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def october(finance_user, team, other_team):
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=36000, rate=price)
    usage(account=account(other_team), flavor=h100, hour=dt.datetime(2026, 10, 9, 4, tzinfo=UTC), unit_seconds=7200,
          rate=price, borrowed=True)
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))


def test_finance_reads_every_team_and_the_lines(october, finance_user):
    client = api(finance_user)
    assert [s["month"] for s in client.get("/api/billing/statements/").json()["results"]] == ["2026-10"]

    detail = client.get("/api/billing/statements/2026-10/").json()
    assert [(t["team"], t["total"]) for t in detail["teams"]] == [("speech", "4.00"), ("vision", "20.00")]
    assert (detail["total"], detail["unallocated_total"]) == ("24.00", "0.00")
    lines = client.get("/api/billing/statements/2026-10/lines/").json()["results"]
    assert [(line["team"], line["kind"], line["borrowed_unit_seconds"], line["amount"]) for line in lines] == [
        ("speech", "usage", 7200, "4.00"), ("vision", "usage", 0, "20.00")]


def test_a_lead_reads_only_their_teams_part_and_another_teams_is_404(october, lead):
    client = api(lead)
    detail = client.get("/api/billing/statements/2026-10/").json()
    assert [t["team"] for t in detail["teams"]] == ["vision"]
    assert (detail["total"], detail["unallocated_total"]) == ("20.00", None)
    assert [line["team"] for line in client.get("/api/billing/statements/2026-10/lines/").json()["results"]] == ["vision"]
    for path in ("", "lines/", "adjustments/"):
        response = client.get(f"/api/billing/statements/2026-10/{path}?team=speech")
        assert response.status_code == 404, path


def test_someone_whose_team_is_not_on_the_statement_sees_no_statement(october, member):
    stranger = UserFactory.create(username="stan")
    MembershipFactory(team=TeamFactory.create(slug="robotics"), user=stranger, role="lead")
    for user in (member, stranger):
        client = api(user)
        assert client.get("/api/billing/statements/").json()["results"] == []
        for path in ("", "lines/", "adjustments/"):
            assert client.get(f"/api/billing/statements/2026-10/{path}").status_code == 404


def test_finance_closes_through_the_api_and_a_second_close_is_a_409_with_a_sentence(finance_user, team):
    client = api(finance_user)
    created = client.post("/api/billing/statements/", {"month": "2026-01"}, format="json")
    assert created.status_code == 201 and created.json()["statement"]["month"] == "2026-01"

    again = client.post("/api/billing/statements/", {"month": "2026-01"}, format="json")
    assert again.status_code == 409
    assert again.json()["message"].startswith("January 2026 was already closed by fiona")


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"month": "2999-01"}, 400, "January 2999 has not ended yet"),
    ({"month": "2026-13"}, 400, "“2026-13” is not a month"),
    ({"month": "Oct"}, 400, "Write the month as YYYY-MM"),
    ({"month": "2026-01", "currency": "EUR"}, 400, "currency cannot be set here"),
])
def test_a_bad_close_is_a_400_with_a_sentence(finance_user, body, status, words):
    response = api(finance_user).post("/api/billing/statements/", body, format="json")
    assert response.status_code == status
    assert words in response.json()["message"]
    assert not Statement.objects.exists()


def test_leads_cannot_close_or_adjust(october, lead):
    client = api(lead)
    assert client.post("/api/billing/statements/", {"month": "2026-01"}, format="json").status_code == 403
    refused = client.post("/api/billing/statements/2026-10/adjustments/",
                          {"team": "vision", "amount": "-5", "reason": "mine"}, format="json")
    assert refused.status_code == 403
    assert not Adjustment.objects.exists()


def test_finance_adjusts_through_the_api_and_refusals_are_sentences(october, finance_user):
    client = api(finance_user)
    path = "/api/billing/statements/2026-10/adjustments/"
    for body, words in [({"team": "vision", "amount": "abc", "reason": "x"}, "“abc” is not an amount"),
                        ({"team": "vision", "amount": "-1", "reason": ""}, "An adjustment needs a reason"),
                        ({"team": "ghosts", "amount": "-1", "reason": "x"}, "There is no team “ghosts”."),
                        ({"team": "vision", "amount": "NaN", "reason": "x"}, "“NaN” is not an amount")]:
        response = client.post(path, body, format="json")
        assert response.status_code == 400 and words in response.json()["message"], body
    assert not Adjustment.objects.exists()

    created = client.post(path, {"team": "vision", "amount": "-3.25", "reason": "GPU 3 broken"}, format="json")
    assert created.status_code == 201
    assert (created.json()["amount"], created.json()["created_by_name"]) == ("-3.25", "fiona")
    assert Adjustment.objects.get().amount == Decimal("-3.25")
    assert client.get("/api/billing/statements/2026-10/").json()["total"] == "20.75"


def test_the_schema_documents_the_statement_endpoints(tmp_path):
    out = tmp_path / "schema.yaml"
    result = subprocess.run([sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn", "--file", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    paths = yaml.safe_load(out.read_text())["paths"]
    assert set(paths["/api/billing/statements/"]) >= {"get", "post"}
    assert set(paths["/api/billing/statements/{month}/"]) & {"get", "put", "patch", "delete"} == {"get"}
    assert set(paths["/api/billing/statements/{month}/adjustments/"]) >= {"get", "post"}
    assert set(paths["/api/billing/statements/{month}/lines/"]) & {"get", "post"} == {"get"}
