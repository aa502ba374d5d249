"""The usage and rate card API: grouped usage for a period, visible only to those who may see it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from drf_spectacular.generators import SchemaGenerator

from billing.models import Rate
from tests.billing.factories import account, rate, usage

pytestmark = pytest.mark.django_db

UTC = dt.UTC
EPOCH = dt.datetime(2026, 1, 1, tzinfo=UTC)
USAGE = "/api/billing/usage/"
RATES = "/api/billing/rates/"


@pytest.fixture
def october(team, other_team, flavor, mig_flavor):
    h100, mig = rate(flavor, "2.50", effective_from=EPOCH), rate(mig_flavor, "7.00", effective_from=EPOCH)
    vision, speech = account(team), account(other_team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 3, 9, tzinfo=UTC), gpu_seconds=8 * 3600,
          owner="alice", rate=h100)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 3, 10, tzinfo=UTC), gpu_seconds=2 * 3600,
          owner="alice", borrowed=True, rate=h100)
    usage(account=vision, flavor=mig_flavor, hour=dt.datetime(2026, 10, 4, 22, tzinfo=UTC), unit_seconds=7 * 3600,
          owner="bob", rate=mig)
    usage(account=speech, flavor=flavor, hour=dt.datetime(2026, 10, 3, 9, tzinfo=UTC), gpu_seconds=500 * 3600,
          owner="sam", rate=h100)
    return vision, speech


def test_usage_by_team_and_flavor_for_a_month(as_user, finance_user, october):
    body = as_user(finance_user).get(USAGE, {"month": "2026-10"}).json()
    assert (body["start"], body["end"], body["currency"], body["by"], body["time_zone"]) == (
        "2026-10-01", "2026-10-31", "USD", ["team", "flavor"], "UTC")
    speech, vision = {"team": "speech", "team_name": "Speech"}, {"team": "vision", "team_name": "Vision"}
    assert body["rows"] == [
        {**speech, "cost_center": "CC-100", "flavor": "h100-80gb", "gpu_hours": "500.00", "cost": "1250.00"},
        {**vision, "cost_center": "CC-100", "flavor": "a100-1g10gb", "gpu_hours": "1.00", "cost": "7.00"},
        {**vision, "cost_center": "CC-100", "flavor": "h100-80gb", "gpu_hours": "10.00", "cost": "25.00"},
    ]
    assert body["total"] == {"gpu_hours": "511.00", "cost": "1282.00"}


def test_usage_by_person_and_day_for_a_run_of_days_in_the_billing_zone(settings, as_user, lead, member, october):
    alice = member.pk  # bob has no account here: his hours were metered before it went (no id)
    settings.BILLING_TIME_ZONE = "America/Los_Angeles"  # Oct 4, 22:00 UTC is still Oct 4 there; 09:00 UTC is Oct 3, 02:00
    body = as_user(lead).get(USAGE, {"start": "2026-10-03", "end": "2026-10-04", "by": "person,day,borrowed"}).json()
    assert body["time_zone"] == "America/Los_Angeles"
    assert body["rows"] == [
        {"person": "alice", "person_id": alice, "day": "2026-10-03", "borrowed": False, "gpu_hours": "8.00", "cost": "20.00"},
        {"person": "alice", "person_id": alice, "day": "2026-10-03", "borrowed": True, "gpu_hours": "2.00", "cost": "5.00"},
        {"person": "bob", "person_id": None, "day": "2026-10-04", "borrowed": False, "gpu_hours": "1.00", "cost": "7.00"},
    ]
    one_day = as_user(lead).get(USAGE, {"start": "2026-10-04", "end": "2026-10-04", "by": "person"}).json()
    assert one_day["rows"] == [{"person": "bob", "person_id": None, "gpu_hours": "1.00", "cost": "7.00"}]


def test_a_member_reads_only_their_teams_usage_and_another_team_is_404(as_user, member, outsider, october):
    mine = as_user(member).get(USAGE, {"month": "2026-10", "by": "team"}).json()
    assert [row["team"] for row in mine["rows"]] == ["vision"]
    response = as_user(member).get(USAGE, {"month": "2026-10", "team": "speech"})
    assert response.status_code == 404
    assert response.json()["message"] == "Not found, or not visible to you."
    assert as_user(member).get(USAGE, {"team": "no-such-team"}).status_code == 404
    theirs = as_user(outsider).get(USAGE, {"month": "2026-10", "by": "team"}).json()
    assert [row["team"] for row in theirs["rows"]] == ["speech"]


@pytest.mark.parametrize(("role", "slug", "status"), [
    ("member", "vision", 200), ("lead", "vision", 200), ("outsider", "vision", 404),
    ("finance_user", "vision", 200), ("admin_user", "vision", 200),
    ("member", "speech", 404), ("lead", "speech", 404), ("outsider", "speech", 200),
])
def test_usage_of_a_named_team_across_roles(request, as_user, october, role, slug, status):
    assert as_user(request.getfixturevalue(role)).get(USAGE, {"team": slug, "month": "2026-10"}).status_code == status


def test_anonymous_callers_get_nothing(client, october):
    assert client.get(USAGE).status_code in (401, 403)
    assert client.get(RATES).status_code in (401, 403)
    assert client.post(RATES, {"flavor": "h100-80gb", "price_per_gpu_hour": "1"}).status_code in (401, 403)


@pytest.mark.parametrize(("query", "sentence"), [
    ({"month": "2026-13"}, "“2026-13” is not a month; write it as YYYY-MM"),
    ({"start": "2026-10-01"}, "Give both start and end, or a month."),
    ({"start": "2026-10-05", "end": "2026-10-01"}, "The end is before the start."),
    ({"start": "2026-10-01", "end": "2026-10-02", "month": "2026-10"}, "Give a month or start and end, not both."),
    ({"start": "2020-01-01", "end": "2026-10-02"}, "A period is at most 366 days"),
    ({"by": "team,password"}, "“team,password” is not a grouping"),
    ({"by": "team,team"}, "is not a grouping"),
])
def test_bad_periods_and_groupings_are_refused_in_words(as_user, finance_user, query, sentence):
    response = as_user(finance_user).get(USAGE, query)
    assert response.status_code == 400
    assert sentence in response.json()["message"]


@pytest.mark.parametrize(("role", "status"), [("member", 403), ("lead", 403), ("outsider", 403),
                                              ("finance_user", 200), ("admin_user", 200)])
def test_the_rate_card_is_read_by_those_who_read_costs(request, as_user, october, role, status):
    response = as_user(request.getfixturevalue(role)).get(RATES)
    assert response.status_code == status
    if status == 200:
        assert {(r["flavor"], r["price_per_gpu_hour"]) for r in response.json()} == {("h100-80gb", "2.5000"),
                                                                                    ("a100-1g10gb", "7.0000")}


def test_finance_sets_a_price_through_the_api_and_a_lead_cannot(as_user, finance_user, lead, flavor):
    created = as_user(finance_user).post(RATES, {"flavor": flavor.slug, "price_per_gpu_hour": "3.10", "currency": "usd"},
                                         content_type="application/json")
    assert created.status_code == 201
    assert created.json()["created_by"] == "fiona" and created.json()["currency"] == "USD"
    assert Rate.objects.get().price_per_gpu_hour == Decimal("3.10")
    refused = as_user(lead).post(RATES, {"flavor": flavor.slug, "price_per_gpu_hour": "0"}, content_type="application/json")
    assert refused.status_code == 403
    assert Rate.objects.count() == 1


@pytest.mark.parametrize(("body", "sentence"), [
    ({"price_per_gpu_hour": "lots"}, "“lots” is not a price"),
    ({"price_per_gpu_hour": "1", "flavor": "nope"}, "flavor"),
    ({"price_per_gpu_hour": "1", "created_by": "root"}, "created_by cannot be set here"),
])
def test_a_refused_price_says_why_and_writes_nothing(as_user, finance_user, flavor, body, sentence):
    response = as_user(finance_user).post(RATES, {"flavor": flavor.slug, **body}, content_type="application/json")
    assert response.status_code == 400
    assert sentence in response.json()["message"]
    assert not Rate.objects.exists()


def test_the_schema_documents_usage_and_rates():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    assert set(paths["/api/billing/usage/"]) == {"get"}
    assert set(paths["/api/billing/rates/"]) == {"get", "post"}
    assert set(paths["/api/billing/idle-policies/"]) == {"get", "post"}
    assert {p["name"] for p in paths["/api/billing/usage/"]["get"]["parameters"]} >= {"month", "start", "end", "team", "by"}
