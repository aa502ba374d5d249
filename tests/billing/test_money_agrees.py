"""One rule per number (billing.money): on every page, export and API answer the lines shown add
up to the total shown, and one figure reads the same wherever it is shown.

A month of random intervals, built to make halves of a cent (prices with four decimals, whole
GPUs, 1/7 slices, several people, guaranteed and borrowed, a price change mid-month that brings a
discount for borrowed hours of a third, another flavor's of an eighth, days in the billing zone), is
metered by the real refresh; then every surface is read and checked against the
others and against each line's own rounding (issue 22 §2: the usage API's rows missed its total by
a cent, the usage page and the budget bar disagreed by one, a statement's page and its CSV by an
adjustment)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import random
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import metering
from billing.budgets.selectors import budget_status
from billing.budgets.services import budget_set
from billing.models import Budget
from billing.statements import selectors as selectors_statements
from billing.statements.selectors import statement_picture
from billing.statements.services import adjustment_add, statement_close
from billing.usage import selectors
from billing.usage.overview import finance_overview
from tenants.models import Department, Team
from tests.billing.factories import account, rate
from tests.billing.metering_helpers import make_interval, make_workload
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db
UTC = dt.UTC
OCTOBER = dt.date(2026, 10, 1)
NOW = dt.datetime(2026, 11, 3, tzinfo=UTC)


def total(values) -> Decimal:
    return sum(values, Decimal(0))


@pytest.fixture(params=[1, 2, 3])
def month(request, settings):
    """Three teams, four people, two flavors, three prices: a random October, metered."""
    settings.BILLING_TIME_ZONE = "Europe/Berlin"  # days and the month are Berlin's, crossing a clock change
    chance = random.Random(request.param)
    h100 = FlavorFactory.create(name="H100", slug="h100", capacity_units=64)
    slice_ = FlavorFactory.create(name="A100 1g", slug="a100-1g", resource_name="nvidia.com/mig-1g.10gb",
                           fraction_denominator=7, capacity_units=56)
    rate(h100, "2.4135", effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC))
    rate(h100, "3.0715", effective_from=dt.datetime(2026, 10, 14, 9, 17, tzinfo=UTC), borrowed_discount="33.33")
    rate(slice_, "0.7785", effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC), borrowed_discount="12.5")
    teams = [TeamFactory.create(slug=slug, name=slug.title()) for slug in ("vision", "nlp", "recsys")]
    research = Department.objects.create(slug="research", name="Research")  # two of them; recsys in none
    Team.objects.filter(pk__in=[teams[0].pk, teams[1].pk]).update(department=research)
    people = [UserFactory.create(username=name) for name in ("alice", "bob", "carol", "dan")]
    for person in people:
        for team in chance.sample(teams, 2):
            MembershipFactory.create(team=team, user=person)
    for _ in range(60):
        team, person, flavor = chance.choice(teams), chance.choice(people), chance.choice([h100, slice_])
        workload = make_workload(team=team, owner=person, flavor=flavor, units=chance.choice([1, 2, 3, 8]),
                                 on_borrowed=chance.random() < 0.3)
        began = dt.datetime(2026, 9, 30, 20, tzinfo=UTC) + dt.timedelta(seconds=chance.randint(0, 31 * 86400))
        make_interval(workload, began, began + dt.timedelta(seconds=chance.randint(60, 30 * 3600)))
    metering.rollups_refresh(until=NOW)
    return teams, people


def test_the_team_page_adds_up_and_agrees_with_the_budget_the_overview_the_api_and_each_person(month, finance_user,
                                                                                              as_user):
    teams, people = month
    overview = finance_overview(month=OCTOBER, now=NOW)
    assert total(row.cost for row in overview.rows) == overview.total.cost
    assert total(line.cost for line in overview.flavor_totals) == overview.total.cost
    assert total(row.gpu_hours for row in overview.rows) == overview.total.gpu_hours
    # Per department: the sum of its teams' rows as shown, and the lines add up to the total.
    (research, nowhere) = overview.departments
    assert (research.slug, research.teams, nowhere.slug, nowhere.teams) == ("research", 2, None, 1)
    assert research.cost == total(row.cost for row in overview.rows if row.team_slug in ("vision", "nlp"))
    assert total(line.cost for line in overview.departments) == overview.total.cost
    assert total(line.gpu_hours for line in overview.departments) == overview.total.gpu_hours
    by_department = as_user(finance_user).get("/api/billing/overview/", {"month": "2026-10"}).json()["departments"]
    assert [(d["department"], Decimal(d["cost"])) for d in by_department] == [("research", research.cost),
                                                                              (None, nowhere.cost)]
    by_team_api = as_user(finance_user).get("/api/billing/usage/", {"month": "2026-10", "by": "team"}).json()
    api_cost = {row["team"]: Decimal(row["cost"]) for row in by_team_api["rows"]}

    for team in teams:
        usage = selectors.team_month_usage(team=team, month=OCTOBER, now=NOW)
        for lines in (usage.by_flavor, usage.by_person, usage.by_day):
            assert total(line.cost for line in lines) == usage.total.cost, team.slug
            assert total(line.gpu_hours for line in lines) == usage.total.gpu_hours, team.slug
        assert all(line.guaranteed_hours + line.borrowed_hours == line.gpu_hours for line in usage.by_flavor)
        spent, _ = selectors.team_month_cost(account=account(team), month=OCTOBER)
        row = next(row for row in overview.rows if row.team_slug == team.slug)
        assert usage.total.cost == spent == row.cost == api_cost.get(team.slug, Decimal(0)), team.slug
        for line in usage.by_person:  # each person's own page reads what the team's page reads of them
            mine = selectors.personal_usage(user=next(p for p in people if p.pk == line.key), month=OCTOBER)
            assert next(own.cost for own in mine.by_team if own.key == account(team).pk) == line.cost


@pytest.mark.parametrize("by", ["team,flavor", "team,person", "person,day,borrowed", "flavor,borrowed", "day"])
def test_every_usage_api_answer_adds_up_for_a_month_and_for_a_run_of_days(month, finance_user, as_user, by):
    client = as_user(finance_user)
    for query in ({"month": "2026-10"}, {"start": "2026-10-13", "end": "2026-10-27"}):
        body = client.get("/api/billing/usage/", {**query, "by": by}).json()
        assert body["rows"], query
        assert total(Decimal(row["cost"]) for row in body["rows"]) == Decimal(body["total"]["cost"]), query
        assert total(Decimal(row["gpu_hours"]) for row in body["rows"]) == Decimal(body["total"]["gpu_hours"]), query
        assert all(len(row["cost"].partition(".")[2]) == 2 for row in body["rows"])  # USD: two decimals, never three


def test_days_of_a_month_read_the_same_in_the_api_and_on_the_team_page(month, finance_user, as_user):
    teams, _ = month
    team = teams[0]
    usage = selectors.team_month_usage(team=team, month=OCTOBER, now=NOW)
    body = as_user(finance_user).get(
        "/api/billing/usage/", {"month": "2026-10", "by": "day", "team": team.slug}).json()
    assert {row["day"]: Decimal(row["cost"]) for row in body["rows"]} == {
        f"{bar.day:%Y-%m-%d}": bar.cost for bar in usage.by_day if bar.cost or bar.gpu_hours}


def test_a_statement_adds_up_on_its_page_its_csv_its_api_and_the_list_after_adjustments(month, finance_user, as_user):
    teams, _ = month
    statement = statement_close(actor=finance_user, month=OCTOBER, now=NOW)
    adjustment_add(actor=finance_user, statement=statement, account=account(teams[0]), amount="-50", reason="Outage")
    adjustment_add(actor=finance_user, statement=statement, account=account(teams[1]), amount="12.34", reason="Support")
    picture = statement_picture(user=finance_user, statement=statement)
    for section in picture.teams:
        assert section.total == total(line.amount for line in section.lines) + total(a.amount for a in section.adjustments)
        usage = selectors.team_month_usage(team=Team.objects.get(slug=section.slug), month=OCTOBER, now=NOW)
        assert section.charged == usage.total.cost + total(  # the statement bills what the usage page showed
            line.amount for line in section.lines if line.kind == "idle_share")
    assert picture.total == total(section.total for section in picture.teams)

    client = as_user(finance_user)
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("billing:statement-csv", args=["2026-10"])).content.decode())))
    csv_team = {row["team"]: Decimal(row["amount"]) for row in rows if row["record"] == "team_total"}
    assert csv_team == {section.slug: section.total for section in picture.teams}
    (charged,) = [Decimal(row["amount"]) for row in rows if row["record"] == "total_charged"]
    assert charged == picture.total

    page = client.get(reverse("billing:statement-detail", args=["2026-10"])).content.decode()
    for section in picture.teams:
        assert f'data-testid="team-total"><strong>{section.total:,.2f}</strong>' in page
    assert f'data-testid="statement-total">{picture.total:,.2f}</span>' in client.get(
        reverse("billing:statement-list")).content.decode()
    api = client.get("/api/billing/statements/2026-10/").json()
    assert Decimal(api["total"]) == picture.total and api["total"] == f"{picture.total:.2f}"
    assert {team["team"]: team["total"] for team in api["teams"]} == {s.slug: f"{s.total:.2f}" for s in picture.teams}

    # By department, as the teams were at close: each the sum of its teams' sections, adding up to the total,
    # the same on the page, in the CSV and the API, and kept when the department is renamed and a team moves.
    Department.objects.filter(slug="research").update(name="Applied Research")
    Team.objects.filter(pk=teams[1].pk).update(department=None)
    teams[1].refresh_from_db()
    late = adjustment_add(actor=finance_user, statement=statement, account=account(teams[1]), amount="1.00",
                          reason="Late fix")
    assert late.department == "Research"  # with the team's lines, not where the team is now
    picture = statement_picture(user=finance_user, statement=statement)
    research, nowhere = selectors_statements.department_totals(picture)
    in_research = [section for section in picture.teams if section.slug in ("vision", "nlp")]
    assert (research.name, research.teams, nowhere.name, nowhere.teams) == ("Research", 2, "No department", 1)
    assert research.total == total(section.total for section in in_research)
    assert research.gpu_hours == total(section.gpu_hours for section in in_research)
    assert research.total + nowhere.total == picture.total
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("billing:statement-csv", args=["2026-10"])).content.decode())))
    assert {row["department"]: Decimal(row["amount"]) for row in rows if row["record"] == "department_total"} == {
        "Research": research.total, "": nowhere.total}
    assert {row["department"] for row in rows if row["record"] == "usage" and row["team"] == "nlp"} == {"Research"}
    page = client.get(reverse("billing:statement-detail", args=["2026-10"])).content.decode()
    assert "<td>Research</td><td class=\"num\">2</td>" in page and f"<strong>{research.total:,.2f}</strong>" in page
    api = client.get("/api/billing/statements/2026-10/").json()
    assert [(d["department"], d["teams"], d["total"]) for d in api["departments"]] == [
        ("Research", 2, f"{research.total:.2f}"), ("", 1, f"{nowhere.total:.2f}")]


def test_the_budget_reads_the_page_total_and_its_percent_to_a_tenth(month, finance_user, as_user):
    teams, _ = month
    team = teams[0]
    usage = selectors.team_month_usage(team=team, month=OCTOBER, now=NOW)
    amount = (usage.total.cost * Decimal("1.5925")).quantize(Decimal("0.01"))
    budget = budget_set(actor=finance_user, team=team, amount=str(amount))
    last_second = dt.datetime(2026, 10, 31, 22, 59, 59, tzinfo=UTC)  # of October in Berlin
    status = budget_status(budget=Budget.objects.get(pk=budget.pk), now=last_second)
    assert status.spent == usage.total.cost
    assert status.percent_shown == f"{int(usage.total.cost * 1000 // amount) / 10:g}"  # 62.7, never 62


def test_every_line_and_workload_bills_borrowed_hours_at_the_discount_as_an_independent_sum_of_intervals(month,
                                                                                                        finance_user):
    """Price for risk (issue 27 §5): an auditor's sum from the intervals alone (their seconds, borrowed
    or not, the price in force each second, its discount when borrowed), rounded once per line and
    per workload, is what the statement and each workload's page bill."""
    from fractions import Fraction

    from billing import periods
    from billing.models import Rate
    from billing.usage.workloads import workload_costs
    from jobs.models import RunInterval

    start, end = periods.month_bounds(OCTOBER)  # Berlin's October
    rates = sorted(Rate.objects.all(), key=lambda r: r.effective_from)
    lines: dict[tuple[str, str, int], Fraction] = {}
    by_workload: dict[int, Fraction] = {}
    borrowed_seconds = 0
    for interval in RunInterval.objects.select_related("workload__team", "flavor"):
        began, ended, workload = interval.started_at, interval.ended_at, interval.workload
        assert ended is not None and workload is not None and interval.workload_id is not None
        ours = [r for r in rates if r.flavor_id == interval.flavor_id]
        cuts = sorted({began, ended, *(r.effective_from for r in ours if began < r.effective_from < ended)})
        for lower, upper in zip(cuts, cuts[1:], strict=False):
            price = [r for r in ours if r.effective_from <= lower][-1]
            per_second = (Fraction(interval.units * interval.fraction_numerator, interval.fraction_denominator * 3600)
                          * Fraction(price.price_per_gpu_hour)
                          * (1 - Fraction(price.borrowed_discount_percent) / 100 if interval.borrowed else 1))
            seconds = int((upper - lower).total_seconds())
            by_workload[interval.workload_id] = by_workload.get(interval.workload_id, Fraction(0)) + seconds * per_second
            in_month = int((min(upper, end) - max(lower, start)).total_seconds())
            if in_month > 0:
                key = (workload.team.slug, interval.flavor.slug, price.pk)
                lines[key] = lines.get(key, Fraction(0)) + in_month * per_second
                borrowed_seconds += in_month if interval.borrowed and price.borrowed_discount_percent else 0
    assert borrowed_seconds > 0  # the month has borrowed hours at a discount to bill

    statement = statement_close(actor=finance_user, month=OCTOBER, now=NOW)
    billed = {(line.account_slug, line.flavor_slug, line.rate_id): line.amount
              for line in statement.lines.filter(kind="usage")}
    assert billed == {key: round(value, 2) for key, value in lines.items()} | {
        key: Decimal("0.00") for key in billed if key not in lines}
    assert {line.borrowed_discount_percent for line in statement.lines.filter(kind="usage", borrowed_unit_seconds__gt=0)
            } >= {Decimal("33.33"), Decimal("12.50")}
    costs = workload_costs(workload_ids=list(by_workload), now=NOW)
    assert {pk: cost.cost for pk, cost in costs.items()} == {pk: round(value, 2) for pk, value in by_workload.items()}
