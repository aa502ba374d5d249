"""The usage pages: a team's month, the finance overview, the rate card and one's own usage.

Numbers come from rollup rows made here; who sees what is checked for every role, and the number
of queries must not grow with teams or hours.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing import periods
from billing.models import CapacityHour, GuaranteeHour, IdlePolicy, LentHour, MeteringState, Rate, UsageHour
from tests.billing.factories import account, rate, usage
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
OCT = "2026-10"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=UTC)


def at(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2026, 10, day, hour, tzinfo=UTC)


@pytest.fixture
def october(team, other_team, flavor, mig_flavor):
    """Vision: alice 10 H100-hours on Oct 3 (2 borrowed), bob 7 MIG slices for an hour on Oct 4 (1 GPU-hour);
    Speech: 500 H100-hours. H100 at 2.50, the slice's GPU at 7.00."""
    h100, mig = rate(flavor, "2.50", effective_from=EPOCH), rate(mig_flavor, "7.00", effective_from=EPOCH)
    vision, speech = account(team), account(other_team)
    usage(account=vision, flavor=flavor, hour=at(3, 9), gpu_seconds=8 * 3600, owner="alice", rate=h100)
    usage(account=vision, flavor=flavor, hour=at(3, 9), gpu_seconds=2 * 3600, owner="alice", borrowed=True, rate=h100)
    usage(account=vision, flavor=mig_flavor, hour=at(4, 22), unit_seconds=7 * 3600, owner="bob", rate=mig)
    usage(account=speech, flavor=flavor, hour=at(3, 9), gpu_seconds=500 * 3600, owner="sam", rate=h100)
    return vision, speech


def page(client, name, *args, **query):
    return client.get(reverse(name, args=args), query)


def test_team_page_shows_the_month_by_flavor_person_and_day(as_user, lead, october):
    html = page(as_user(lead), "billing:team-usage", "vision", month=OCT).content.decode()
    assert 'data-testid="total-hours">11.00<' in html
    assert 'data-testid="total-cost">32.00 USD<' in html  # 10 × 2.50 + 1 × 7.00
    by_flavor = html.split('data-testid="by-flavor"')[1].split("</table>")[0]
    assert re.search(r"H100 80GB</td><td class=\"num\">8.00</td><td class=\"num\">2.00</td><td class=\"num\">0.00</td>"
                     r"<td class=\"num\">10.00</td><td class=\"num\">25.00<", by_flavor)
    assert re.search(r"A100 1g.10gb</td><td class=\"num\">1.00</td><td class=\"num\">0.00</td>", by_flavor)
    by_person = html.split('data-testid="by-person"')[1].split("</table>")[0]
    assert by_person.index("alice") < by_person.index("bob")
    assert ">sam<" not in html and "500.00" not in html and "1250.00" not in html  # Speech's usage is not on Vision's page
    assert "you borrowed 2 H100 80GB GPU-hours" in html
    assert "In October 2026 you used 9 GPU-hours on your own quota" in html


def test_the_daily_chart_is_an_svg_drawn_on_the_server_with_a_bar_per_local_day(as_user, member, october):
    html = page(as_user(member), "billing:team-usage", "vision", month=OCT).content.decode()
    chart = html.split('data-testid="daily-chart"')[1].split("</svg>")[0]
    assert chart.count("<rect") == 31
    assert "<title>3 Oct: 10.00 GPU-hours, 25.00 USD</title>" in chart
    assert "<title>4 Oct: 1.00 GPU-hours, 7.00 USD</title>" in chart
    heights = [int(h) for h in re.findall(r'<rect [^>]*height="(\d+)"', chart)]
    assert max(heights) == 120 and heights.count(0) == 29  # the busiest day is full height; idle days are flat


def test_the_month_picker_defaults_to_this_month_and_refuses_what_is_not_a_month(as_user, lead, october):
    client = as_user(lead)
    html = page(client, "billing:team-usage", "vision").content.decode()
    assert 'data-testid="total-hours">0.00<' in html  # October's hours are not this month's
    for bad in ("october", "2026-13", "26-10", "2026-1"):
        response = page(client, "billing:team-usage", "vision", month=bad)
        assert response.status_code == 400
        assert "is not a month; write it as YYYY-MM" in response.content.decode()
    # A page load gets the portal's 400 page around the sentence (it was a bare line of text); htmx the sentence.
    html = page(client, "billing:team-usage", "vision", month="2026-13").content.decode()
    assert "The request could not be read" in html and "Go to your dashboard" in html
    fragment = client.get(reverse("billing:team-usage", args=["vision"]), {"month": "2026-13"}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 400 and fragment.content.decode().startswith("“2026-13” is not a month")


def test_the_current_month_shows_the_forecast_and_a_slot_for_the_budget_bar(as_user, lead, team, flavor):
    r = rate(flavor, "1.00", effective_from=EPOCH)
    hour = periods.hour_floor(timezone.now())  # this hour is in this month, even in its first hour
    usage(account=account(team), flavor=flavor, hour=hour, gpu_seconds=3600, rate=r)
    html = page(as_user(lead), "billing:team-usage", "vision").content.decode()
    assert 'data-testid="forecast"' in html and "at this rate by month end" in html


def test_the_current_month_says_how_far_the_rollups_count(as_user, lead, team, flavor):
    from billing.models import MeteringState

    now = timezone.now()
    metered = max(periods.month_bounds(periods.current_month())[0], now - dt.timedelta(minutes=1))
    MeteringState.objects.all().delete()
    MeteringState.objects.create(metered_until=metered)
    html = page(as_user(lead), "billing:team-usage", "vision").content.decode()
    local = timezone.localtime(metered)
    assert f'counted up to <span data-testid="metered-until">{local:%H:%M}</span>' in html


PAGES = [("billing:team-usage", ("vision",)), ("billing:finance-overview", ()), ("billing:rate-card", ()),
         ("billing:my-usage", ())]
EXPECTED = {
    # role → status per page, in PAGES order
    "member": (200, 403, 403, 200),
    "lead": (200, 403, 403, 200),
    "outsider": (404, 403, 403, 200),
    "finance_user": (200, 200, 200, 200),
    "admin_user": (200, 200, 200, 200),
}


@pytest.mark.parametrize("role", sorted(EXPECTED))
def test_who_sees_which_usage_page(request, as_user, role, october):
    client = as_user(request.getfixturevalue(role))
    got = tuple(page(client, name, *args, month=OCT).status_code for name, args in PAGES)
    assert got == EXPECTED[role]


def test_anonymous_visitors_are_sent_to_sign_in_from_every_usage_page(client, october):
    for name, args in PAGES:
        response = page(client, name, *args)
        assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_team_that_does_not_exist_and_one_not_yours_answer_alike(as_user, outsider, october):
    client = as_user(outsider)
    assert page(client, "billing:team-usage", "vision").status_code == 404
    assert page(client, "billing:team-usage", "no-such-team").status_code == 404
    assert page(client, "billing:team-usage", "speech", month=OCT).status_code == 200


def test_finance_overview_lists_every_team_with_cost_center_totals_and_change(as_user, finance_user, october, flavor):
    vision, speech = october
    # September: Vision spent 20.00 (so +60 %), Speech nothing (no change to show).
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 9, 30, 12, tzinfo=UTC), gpu_seconds=8 * 3600,
          rate=Rate.objects.get(flavor=flavor))
    html = page(as_user(finance_user), "billing:finance-overview", month=OCT).content.decode()
    rows = html.split('data-testid="overview-teams"')[1].split("</table>")[0]
    assert rows.index("Speech") < rows.index("Vision")  # by cost, highest first, by default
    assert f'href="{reverse("billing:team-usage", args=["vision"])}?month=2026-10"' in rows
    assert "CC-100" in rows
    assert re.search(r"Vision</a></td>\s*<td>CC-100</td>\s*<td class=\"num\">11.00</td>\s*<td class=\"num\">32.00</td>"
                     r"\s*<td class=\"num\">\+60.0 %</td>", rows)  # 32 against 20.00 in September
    totals = html.split('data-testid="flavor-totals"')[1].split("</table>")[0]
    assert re.search(r"H100 80GB</td><td class=\"num\">510.00</td><td class=\"num\">1275.00<", totals)
    assert 'data-testid="overview-total">1282.00 USD<' in html


def test_finance_overview_sorts_by_any_column_through_the_query_string(as_user, finance_user, october):
    client = as_user(finance_user)
    rows = page(client, "billing:finance-overview", month=OCT, sort="team", dir="asc").content.decode()
    table = rows.split('data-testid="overview-teams"')[1]
    assert table.index("Speech") < table.index("Vision")
    table = page(client, "billing:finance-overview", month=OCT, sort="team", dir="desc").content.decode()
    table = table.split('data-testid="overview-teams"')[1]
    assert table.index("Vision") < table.index("Speech")
    response = page(client, "billing:finance-overview", sort="password")
    assert response.status_code == 400 and "is not a column to sort by" in response.content.decode()


def test_finance_overview_costs_the_same_queries_for_two_teams_or_forty(as_user, finance_user, october, flavor):
    client = as_user(finance_user)
    page(client, "billing:my-usage")  # the session is saved once, on the first request
    with CaptureQueriesContext(connection) as few:
        assert page(client, "billing:finance-overview", month=OCT).status_code == 200
    h100 = Rate.objects.get(flavor=flavor)
    for n in range(38):
        acc = account(TeamFactory.create(slug=f"t{n}"))
        UsageHour.objects.bulk_create([UsageHour(hour=at(day, 5), account=acc, flavor=flavor, owner_username=f"u{n}",
                                                 rate=h100, fraction_numerator=1, fraction_denominator=1, unit_seconds=60)
                                       for day in range(1, 29)])
    with CaptureQueriesContext(connection) as many:
        html = page(client, "billing:finance-overview", month=OCT).content.decode()
    assert html.count('href="/billing/teams/') == 40
    assert len(many) == len(few), [q["sql"] for q in many.captured_queries]


def test_team_page_costs_the_same_queries_for_an_hour_or_a_month_of_rows(as_user, lead, october, flavor, team):
    client = as_user(lead)
    page(client, "billing:my-usage")  # the session is saved once, on the first request
    with CaptureQueriesContext(connection) as few:
        assert page(client, "billing:team-usage", "vision", month=OCT).status_code == 200
    h100 = Rate.objects.get(flavor=flavor)
    UsageHour.objects.bulk_create([UsageHour(hour=at(1) + dt.timedelta(hours=h), account=account(team), flavor=flavor,
                                             owner_username=f"p{h % 9}", rate=h100, fraction_numerator=1,
                                             fraction_denominator=1, unit_seconds=600) for h in range(31 * 24)])
    with CaptureQueriesContext(connection) as many:
        assert page(client, "billing:team-usage", "vision", month=OCT).status_code == 200
    assert len(many) == len(few) == 18, [q["sql"] for q in many.captured_queries]
    # One asks whether any GPU failed this month (the credit it would bring, billing.statements.xid_credits); four
    # are the simulated metrics door reading the simulated cluster's pods and nodes (no database behind
    # a real Prometheus); one reads how far energy is metered (none here, so no sum of its hours).
    # By flavor, by person, by day and the allocated hours come from one grouped read of the rollups.
    assert sum("billing_usage" in q["sql"] for q in many.captured_queries) == 1


def test_team_page_this_month_reads_the_rollups_once_for_its_figures_and_its_forecast(as_user, lead, team, flavor):
    r = rate(flavor, "1.00", effective_from=EPOCH)
    usage(account=account(team), flavor=flavor, hour=periods.hour_floor(timezone.now()), gpu_seconds=3600, rate=r)
    client = as_user(lead)
    page(client, "billing:my-usage")  # the session is saved once, on the first request
    with CaptureQueriesContext(connection) as read:
        html = page(client, "billing:team-usage", "vision").content.decode()
    assert 'data-testid="forecast"' in html
    assert len(read) == 18, [q["sql"] for q in read.captured_queries]
    assert sum("billing_usage" in q["sql"] for q in read.captured_queries) == 1


def test_finance_sets_a_price_on_the_rate_card_without_the_admin(as_user, finance_user, flavor):
    client = as_user(finance_user)
    assert not finance_user.is_staff
    response = client.post(reverse("billing:rate-card"), {"flavor": flavor.slug, "price_per_gpu_hour": "3.25",
                                                          "currency": "eur", "note": "new contract"})
    assert response.status_code == 302
    created = Rate.objects.get(flavor=flavor)
    assert (created.price_per_gpu_hour, created.currency, created.created_by) == (Decimal("3.25"), "EUR", finance_user)
    html = client.get(reverse("billing:rate-card")).content.decode()
    assert "3.2500 EUR" in html and "in force" in html


@pytest.mark.parametrize(("data", "sentence"), [
    ({"price_per_gpu_hour": "cheap"}, "is not a price; give a number such as 2.75"),
    ({"price_per_gpu_hour": "-1"}, "A price per GPU-hour is zero or more."),
    ({"price_per_gpu_hour": "1", "currency": "$$"}, "The currency is a three-letter code"),
    ({"price_per_gpu_hour": "1", "effective_from": "2020-01-01 00:00"}, "A rate cannot start in the past"),
    ({"price_per_gpu_hour": "1", "effective_from": "soon"}, "Write the moment as YYYY-MM-DD HH:MM."),
])
def test_a_refused_price_says_why_and_writes_nothing(as_user, finance_user, flavor, data, sentence):
    response = as_user(finance_user).post(reverse("billing:rate-card"),
                                          {"flavor": flavor.slug, "currency": "USD", **data})
    assert response.status_code == 400
    assert sentence in response.content.decode()
    assert not Rate.objects.exists()


def test_a_lead_cannot_set_a_price(as_user, lead, flavor):
    response = as_user(lead).post(reverse("billing:rate-card"), {"flavor": flavor.slug, "price_per_gpu_hour": "0"})
    assert response.status_code == 403
    assert not Rate.objects.exists()


def test_a_member_sees_their_own_usage_and_not_a_colleagues(as_user, member, october):
    html = page(as_user(member), "billing:my-usage", month=OCT).content.decode()
    assert 'data-testid="my-hours">10.00<' in html and 'data-testid="my-cost">25.00 USD<' in html
    assert reverse("billing:team-usage", args=["vision"]) in html


def test_the_nav_offers_usage_to_everyone_and_finance_to_finance(as_user, member, finance_user, october):
    member_html = as_user(member).get(reverse("billing:my-usage")).content.decode()
    assert reverse("billing:my-usage") in member_html and reverse("billing:finance-overview") not in member_html
    assert reverse("billing:finance-overview") in as_user(finance_user).get(reverse("billing:my-usage")).content.decode()


def test_the_ledger_says_what_the_team_lent_and_borrowed(as_user, lead, october, flavor):
    vision, speech = october
    # Oct 5, 12:00: Vision holds a guarantee of 16 H100 and used none of it; Speech ran 2 GPU-hours borrowed.
    GuaranteeHour.objects.create(hour=at(5, 12), account=vision, flavor=flavor, unit_seconds=16 * 3600, lends_idle=True)
    usage(account=speech, flavor=flavor, hour=at(5, 12), gpu_seconds=2 * 3600, owner="sam", borrowed=True,
          rate=Rate.objects.get(flavor=flavor))
    # The lent row metering makes of that hour (the rows above are written directly): Vision, the only lender.
    LentHour.objects.create(hour=at(5, 12), account=vision, flavor=flavor, unit_seconds=2 * 3600)
    html = unescape(page(as_user(lead), "billing:team-usage", "vision", month=OCT).content.decode())
    assert ("In October 2026 you used 9 GPU-hours on your own quota; you lent 2 H100 80GB GPU-hours of idle quota "
            "to other teams; you borrowed 2 H100 80GB GPU-hours of other teams' idle quota.") in html
    by_flavor = html.split('data-testid="by-flavor"')[1].split("</table>")[0]
    assert re.search(r"H100 80GB</td><td class=\"num\">8.00</td><td class=\"num\">2.00</td><td class=\"num\">2.00</td>",
                     by_flavor)


def test_finance_overview_shows_unallocated_capacity_and_what_is_shared(as_user, finance_user, october, flavor, mig_flavor):
    vision, _ = october
    # Oct 3, 09:00: 600 H100 of capacity for an hour, 510 used; the slices: 56 for an hour, 7 used, shared by guarantee.
    CapacityHour.objects.create(hour=at(3, 9), flavor=flavor, fraction_numerator=1, fraction_denominator=1,
                                unit_seconds=600 * 3600)
    CapacityHour.objects.create(hour=at(4, 22), flavor=mig_flavor, fraction_numerator=1, fraction_denominator=7,
                                unit_seconds=56 * 3600)
    GuaranteeHour.objects.create(hour=at(4, 22), account=vision, flavor=mig_flavor, unit_seconds=14 * 3600)
    IdlePolicy.objects.create(flavor=mig_flavor, mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE)
    html = page(as_user(finance_user), "billing:finance-overview", month=OCT).content.decode()
    table = html.split('data-testid="unallocated"')[1].split("</table>")[0]
    assert re.search(r"H100 80GB</td><td class=\"num\">90.00</td><td class=\"num\">0.00</td>", table)
    assert re.search(r"A100 1g.10gb</td><td class=\"num\">7.00</td><td class=\"num\">7.00</td>", table)  # 49 slices = 7 GPUs


def test_finance_overview_follows_the_rollups_as_they_change(as_user, finance_user, october, flavor):
    client = as_user(finance_user)
    total = 'data-testid="overview-total">{} USD<'
    assert total.format("1282.00") in page(client, "billing:finance-overview", month=OCT).content.decode()
    assert total.format("1282.00") in page(client, "billing:finance-overview", month=OCT).content.decode()
    vision, _ = october
    added = usage(account=vision, flavor=flavor, hour=at(9, 9), gpu_seconds=3600, owner="carol",
                  rate=Rate.objects.get(flavor=flavor))
    assert total.format("1284.50") in page(client, "billing:finance-overview", month=OCT).content.decode()
    # A refresh that rewrites an hour in place (same ids) is seen through the metering stamp.
    UsageHour.objects.filter(pk=added.pk).update(unit_seconds=2 * 3600)
    MeteringState.objects.create(refreshed_at=timezone.now())
    assert total.format("1287.00") in page(client, "billing:finance-overview", month=OCT).content.decode()


def test_finance_overview_shows_a_hundred_teams_a_page_sorted_over_all_of_them(as_user, finance_user, october, flavor):
    h100 = Rate.objects.get(flavor=flavor)
    for n in range(120):
        acc = account(TeamFactory.create(slug=f"t{n:03}", name=f"T{n:03}"))
        usage(account=acc, flavor=flavor, hour=at(2, 2), gpu_seconds=3600 * (n + 1), owner="x", rate=h100)
    client = as_user(finance_user)
    first = page(client, "billing:finance-overview", month=OCT).content.decode()
    assert first.count('href="/billing/teams/') == 100
    assert first.index(">Speech<") < first.index(">T119<") < first.index(">T118<")  # by cost over all teams
    assert "Page 1 of 2 · 122 in all" in first
    second = page(client, "billing:finance-overview", month=OCT, page=2).content.decode()
    assert second.count('href="/billing/teams/') == 22 and ">T000<" in second and ">T119<" not in second
