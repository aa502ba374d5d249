"""GPU-hours and cost so far of a workload, on its page and in the list, and a team's top workloads."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing import metering
from billing.money import ROUNDING_HOURS
from billing.usage import selectors
from billing.usage.workloads import WorkloadCost, top_workloads, workload_costs
from jobs import services
from jobs.models import RunInterval
from tests.billing.factories import rate
from tests.helpers import make_ready

pytestmark = pytest.mark.django_db

UTC = dt.UTC
T0 = dt.datetime(2026, 10, 5, 10, tzinfo=UTC)


def launch(user, team, template, flavor, name, units=2):
    return services.workload_launch(user=user, request=services.LaunchRequest(
        team=team, template=template, flavor=flavor, name=name, units=units))


def interval(workload, start, minutes=None, units=None, uid=None):
    return RunInterval.objects.create(
        workload=workload, pod_uid=uid or f"uid-{workload.pk}-{start.timestamp()}", pod_name=f"{workload.k8s_name}-0",
        resource_name=workload.flavor.resource_name, units=units or workload.units, started_at=start,
        ended_at=start + dt.timedelta(minutes=minutes) if minutes is not None else None)


def test_a_workloads_cost_splits_at_a_price_change_and_meters_an_open_interval_to_now(ready_team, member, training, flavor):
    rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    rate(flavor, "4.00", effective_from=T0 + dt.timedelta(hours=1))
    workload = launch(member, ready_team, training, flavor, "detector")
    interval(workload, T0, minutes=90, uid="a")                                             # 2 GPUs × 1.5 h: 4.00 + 4.00
    interval(workload, T0 + dt.timedelta(hours=3), units=1, uid="b")                        # still running: 1 GPU × 30 min
    idle = launch(member, ready_team, training, flavor, "idle")
    costs = workload_costs(workload_ids=[workload.pk, idle.pk], now=T0 + dt.timedelta(hours=3, minutes=30))
    assert costs[workload.pk] == WorkloadCost(gpu_hours=Decimal("3.50"), cost=Decimal("10.00"), currency="USD")
    assert costs[idle.pk].gpu_hours == Decimal("0.00") and costs[idle.pk].cost is None


def test_a_slice_costs_its_fraction_and_unpriced_time_costs_nothing(ready_team, member, training, flavor):
    rate(flavor, "3.00", effective_from=T0 + dt.timedelta(minutes=30))
    workload = launch(member, ready_team, training, flavor, "early")
    interval(workload, T0, minutes=60)  # 2 GPUs, priced only in the second half hour
    cost = workload_costs(workload_ids=[workload.pk])[workload.pk]
    assert (cost.gpu_hours, cost.cost) == (Decimal("2.00"), Decimal("3.00"))


def test_the_workload_page_and_list_show_gpu_hours_and_cost_so_far(ready_team, member, training, flavor, as_user):
    rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    workload = launch(member, ready_team, training, flavor, "detector")
    interval(workload, timezone.now() - dt.timedelta(hours=5), minutes=90)
    client = as_user(member)
    detail = client.get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert '<span data-testid="workload-cost">3.00 GPU-h · 6.00 USD</span>' in detail
    listed = client.get(reverse("jobs:workload-list")).content.decode()
    assert '<span data-testid="workload-cost">3.00 GPU-h · 6.00 USD</span>' in listed
    fragment = client.get(reverse("jobs:workload-list"), HTTP_HX_REQUEST="true").content.decode()
    assert "3.00 GPU-h · 6.00 USD" in fragment


def test_the_workload_list_stays_at_the_same_number_of_queries_with_costs(ready_team, member, training, flavor, as_user):
    rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    client = as_user(member)
    client.get(reverse("jobs:workload-list"))  # the session is saved once, on the first request

    def add(prefix: str, n: int) -> None:
        for i in range(n):
            w = launch(member, ready_team, training, flavor, f"{prefix}-{i}", units=1)
            for k in range(3):
                interval(w, T0 + dt.timedelta(hours=k), minutes=30, uid=f"{prefix}-{i}-{k}")

    add("a", 3)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("jobs:workload-list"))
    add("b", 27)
    with CaptureQueriesContext(connection) as many:
        html = client.get(reverse("jobs:workload-list")).content.decode()
    assert html.count('data-testid="workload-cost"') == 25  # a page of them
    assert len(many) == len(few)


def test_top_workloads_are_the_teams_biggest_in_the_month_biggest_first(ready_team, member, training, flavor, other_team,
                                                                      outsider, as_user, lead):
    rate(flavor, "1.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    small = launch(member, ready_team, training, flavor, "small", units=1)
    big = launch(member, ready_team, training, flavor, "big", units=4)
    interval(small, T0, minutes=60)                                      # 1 GPU-hour
    interval(big, T0, minutes=30)                                        # 2 GPU-hours
    interval(big, dt.datetime(2026, 9, 30, 23, tzinfo=UTC), minutes=120, uid="crosses")  # 1 h of it in October: 4
    interval(small, dt.datetime(2026, 11, 2, tzinfo=UTC), minutes=600, uid="nov")         # November: not counted
    theirs = launch(outsider, make_ready(other_team, flavor), training, flavor, "theirs", units=8)
    interval(theirs, T0, minutes=600)
    metering.rollups_refresh()
    html = as_user(lead).get(reverse("billing:team-usage", args=["vision"]), {"month": "2026-10"}).content.decode()
    table = html.split('data-testid="top-workloads"')[1].split("</table>")[0]
    assert table.index(">big<") < table.index(">small<")
    assert "theirs" not in html
    lines = top_workloads(team=ready_team, start=dt.datetime(2026, 10, 1, tzinfo=UTC),
                                    end=dt.datetime(2026, 11, 1, tzinfo=UTC), now=T0 + dt.timedelta(days=40))
    assert [(line.workload.name, line.gpu_hours, line.cost) for line in lines] == [
        ("big", Decimal("6.00"), Decimal("6.00")), ("small", Decimal("1.00"), Decimal("1.00"))]
    only_one = top_workloads(team=ready_team, start=dt.datetime(2026, 10, 1, tzinfo=UTC),
                                       end=dt.datetime(2026, 11, 1, tzinfo=UTC), limit=1)
    assert [line.workload.name for line in only_one] == ["big"]


def _page_figures(team, month: dt.date, now: dt.datetime) -> dict[str, tuple[Decimal, Decimal | None]]:
    """The same single workload's GPU-hours and cost as each part of the team usage page shows it."""
    usage = selectors.team_month_usage(team=team, month=month, now=now)
    [top], [person], [flavor_line] = usage.top_workloads, usage.by_person, usage.by_flavor
    return {"top workloads": (top.gpu_hours, top.cost), "by person": (person.gpu_hours, person.cost),
            "by flavor": (flavor_line.gpu_hours, flavor_line.cost), "month total": (usage.total.gpu_hours, usage.total.cost)}


def test_one_workloads_cost_agrees_on_every_part_of_the_team_page_and_with_the_month_cost(
        ready_team, member, training, flavor, other_team, outsider):
    """2 GPUs from 09:45:00.7 to 11:15:30.3 on Oct 5 (metering counts whole seconds: 09:45:00 to
    11:15:30), crossing two hour boundaries and a price change at 10:30:
    2 × 2,700 s at 3.00 = 4.50; 2 × 2,730 s at 4.50 = 6.825; together 10,860 GPU-seconds
    (3.0166… GPU-hours, shown 3.02) and 11.325 USD, rounded half-even to 11.32."""
    rate(flavor, "3.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    rate(flavor, "4.50", effective_from=dt.datetime(2026, 10, 5, 10, 30, tzinfo=UTC))
    workload = launch(member, ready_team, training, flavor, "detector", units=2)
    RunInterval.objects.create(
        workload=workload, pod_uid="detector-0", pod_name="detector-0", resource_name=flavor.resource_name, units=2,
        started_at=dt.datetime(2026, 10, 5, 9, 45, 0, 700000, tzinfo=UTC),
        ended_at=dt.datetime(2026, 10, 5, 11, 15, 30, 300000, tzinfo=UTC))
    theirs = launch(outsider, make_ready(other_team, flavor), training, flavor, "theirs", units=8)
    interval(theirs, T0, minutes=600)  # another team's: in no figure of Vision's
    metering.rollups_refresh()

    figures = _page_figures(ready_team, dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 20, tzinfo=UTC))
    assert figures == dict.fromkeys(figures, (Decimal("3.02"), Decimal("11.32"))), figures
    account = selectors.account_for_team(team=ready_team)
    assert account is not None
    assert selectors.team_month_cost(account=account, month=dt.date(2026, 10, 1)) == (Decimal("11.32"), "USD")
    assert workload_costs(workload_ids=[workload.pk])[workload.pk].cost == Decimal("11.32")


def test_top_workloads_stop_where_the_rollups_stop_so_a_page_read_after_a_refresh_still_agrees(
        ready_team, member, training, flavor):
    """The browser report (2.00 USD in top workloads, 60.00 USD by person for one run): the
    simulated cluster's clock runs ahead of the portal's, so a 2-GPU pod at 1 USD a GPU-second
    "ended" 30 s in the future; the rollups were refreshed 1 s after it started, the page read
    29 s later. Top workloads counted the intervals up to the page's now and the rollups up to
    their refresh: one figure was 1 s of the run, the other 30 s. Both now stop at the watermark."""
    rate(flavor, "3600", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    workload = launch(member, ready_team, training, flavor, "run", units=2)
    started = dt.datetime(2026, 10, 10, 12, 0, 0, tzinfo=UTC)
    interval(workload, started, minutes=0.5, uid="run-0")  # the cluster says it ran 30 s
    metering.rollups_refresh(until=started + dt.timedelta(seconds=1))  # refreshed 1 s in

    figures = _page_figures(ready_team, dt.date(2026, 10, 1), now=started + dt.timedelta(seconds=30))
    assert figures == dict.fromkeys(figures, (Decimal("0.00"), Decimal("2.00"))), figures

    metering.rollups_refresh()  # later, the portal's clock has passed the run's end: all of it, everywhere
    figures = _page_figures(ready_team, dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 20, tzinfo=UTC))
    assert figures == dict.fromkeys(figures, (Decimal("0.02"), Decimal("60.00"))), figures


def test_a_team_page_before_any_metering_lists_no_top_workloads_as_it_lists_no_hours(ready_team, member, training,
                                                                                     flavor):
    rate(flavor, "1.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    interval(launch(member, ready_team, training, flavor, "early"), T0, minutes=60)
    usage = selectors.team_month_usage(team=ready_team, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 20, tzinfo=UTC))
    assert (usage.top_workloads, usage.by_person, usage.total.cost) == ([], [], Decimal("0.00"))


def test_costs_summed_per_fraction_equal_the_exact_sum_over_each_interval(ready_team, member, training, flavor):
    """The invariant of summing whole seconds per workload, fraction and rate: the same GPU-hours
    and cost, to the cent, as adding each interval's exact Fraction (slices of a seventh, seconds
    with microseconds, intervals across a price change and clipped to a period)."""
    from fractions import Fraction

    from billing.models import Rate
    from billing.money import SECONDS_PER_HOUR, round_money, round_places

    rate(flavor, "2.10", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    rate(flavor, "3.70", effective_from=T0 + dt.timedelta(hours=2, seconds=0.4))
    workload = launch(member, ready_team, training, flavor, "slices", units=1)
    for k in range(40):
        start = T0 + dt.timedelta(minutes=7 * k, seconds=k * 1.37, microseconds=k * 9999)
        RunInterval.objects.create(
            workload=workload, pod_uid=f"slice-{k}", pod_name=f"{workload.k8s_name}-{k}",
            resource_name=flavor.resource_name, units=1 + k % 3, fraction_numerator=1 + k % 2, fraction_denominator=7,
            started_at=start, ended_at=start + dt.timedelta(minutes=11, microseconds=k * 777) if k % 5 else None)
    start, end, now = T0 + dt.timedelta(minutes=13), T0 + dt.timedelta(hours=4, seconds=3.3), T0 + dt.timedelta(hours=6)
    rates = list(Rate.objects.filter(flavor=flavor).order_by("effective_from"))
    for window in ({}, {"start": start, "end": end}):
        seconds, amount = Fraction(0), Fraction(0)
        for i in RunInterval.objects.filter(workload=workload):
            lower = max(i.started_at, window["start"]) if window else i.started_at
            upper = min(i.ended_at or now, window["end"]) if window else (i.ended_at or now)
            lower, upper = lower.replace(microsecond=0), upper.replace(microsecond=0)
            if upper <= lower:
                continue
            share = Fraction(i.units * i.fraction_numerator, i.fraction_denominator)
            seconds += share * int((upper - lower).total_seconds())
            for n, r in enumerate(rates):
                a = max(lower, r.effective_from.replace(microsecond=0))
                b = min(upper, rates[n + 1].effective_from.replace(microsecond=0)) if n + 1 < len(rates) else upper
                if b > a:
                    amount += share * int((b - a).total_seconds()) / SECONDS_PER_HOUR * Fraction(r.price_per_gpu_hour)
        cost = workload_costs(workload_ids=[workload.pk], now=now, **window)[workload.pk]
        assert cost.gpu_hours == round_places(seconds / SECONDS_PER_HOUR, ROUNDING_HOURS)
        assert cost.cost == round_money(amount, "USD") and cost.cost > 0


def _one_by_one(intervals, rates, *, now, start=None, end=None):
    """The reference: every interval read and priced on its own, second by second of each rate's window."""
    from fractions import Fraction

    seconds, amounts = Fraction(0), Fraction(0)
    ordered = sorted(rates, key=lambda r: r.effective_from)
    for row in intervals:
        lower = (max(row.started_at, start) if start else row.started_at).replace(microsecond=0)
        upper = (min(row.ended_at or now, end) if end else (row.ended_at or now)).replace(microsecond=0)
        if upper <= lower:
            continue
        share = Fraction(row.units * row.fraction_numerator, row.fraction_denominator)
        seconds += share * int((upper - lower).total_seconds())
        for i, found in enumerate(ordered):
            since = found.effective_from.replace(microsecond=0)
            until = ordered[i + 1].effective_from.replace(microsecond=0) if i + 1 < len(ordered) else None
            a, b = max(lower, since), (min(upper, until) if until else upper)
            if b > a:
                amounts += share * int((b - a).total_seconds()) / 3600 * Fraction(found.price_per_gpu_hour)
    return seconds / 3600, amounts


@pytest.mark.parametrize("seed", range(6))
def test_summing_in_the_database_prices_exactly_as_reading_each_interval(ready_team, member, training, flavor, seed):
    """Random intervals (some open, some with fractions of a second, some across price changes)
    priced by the grouped sums equal the interval-by-interval reference, with and without a period."""
    import random

    from billing.money import round_money, round_places

    chance = random.Random(seed)
    prices = [rate(flavor, f"{chance.randint(1, 9)}.{chance.randint(0, 99):02d}",
                   effective_from=T0 + dt.timedelta(hours=hours)) for hours in sorted(chance.sample(range(-5, 30), 3))]
    workloads = [launch(member, ready_team, training, flavor, f"w{n}", units=chance.randint(1, 4)) for n in range(3)]
    for n in range(40):
        began = T0 + dt.timedelta(seconds=chance.randint(-6 * 3600, 30 * 3600), microseconds=chance.randint(0, 999_999))
        open_ = chance.random() < 0.1
        RunInterval.objects.create(
            workload=chance.choice(workloads), pod_uid=f"u{seed}-{n}", pod_name=f"p{n}", resource_name=flavor.resource_name,
            units=chance.randint(1, 4), started_at=began, fraction_numerator=chance.choice([1, 1, 1, 3]),
            fraction_denominator=chance.choice([1, 1, 7]),
            ended_at=None if open_ else began + dt.timedelta(seconds=chance.randint(0, 8 * 3600),
                                                             microseconds=chance.randint(0, 999_999)))
    now = T0 + dt.timedelta(hours=40)
    for window in ({}, {"start": T0 + dt.timedelta(hours=2, seconds=0.5), "end": T0 + dt.timedelta(hours=20)}):
        found = workload_costs(workload_ids=[w.pk for w in workloads], now=now, **window)
        for workload in workloads:
            hours, amount = _one_by_one(RunInterval.objects.filter(workload=workload), prices, now=now, **window)
            assert found[workload.pk].gpu_hours == round_places(hours, 2), (seed, window)
            assert found[workload.pk].cost == (round_money(amount, "USD") if amount else None), (seed, window)


def test_a_workload_that_moved_to_borrowed_quota_costs_its_borrowed_seconds_at_the_discount_everywhere(
        ready_team, member, training, flavor, finance_user):
    """2 GPUs from 09:45:00.7 to 11:15:30.3 on Oct 5 at 3.00 a GPU-hour, 30 % off borrowed hours;
    guaranteed until 10:10:20.9 (a second team's launch took the guarantee: mark_borrowed split the
    interval there), borrowed from then, guaranteed again from 11:00:00: metering counts whole
    seconds, so 2 × (1,520 + 930) s at 3.00 = 4.0833… and 2 × 2,980 s at 2.10 = 3.4766…; 7.56 in all
    (exactly), where 10,860 GPU-seconds at the full price would be 9.05: on the workload, the team
    page, the month's cost and the statement alike."""
    from jobs.models import RunIntervalSwitch

    rate(flavor, "3.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC), borrowed_discount="30")
    workload = launch(member, ready_team, training, flavor, "detector", units=2)
    pod = RunInterval.objects.create(
        workload=workload, pod_uid="detector-0", pod_name="detector-0", resource_name=flavor.resource_name, units=2,
        started_at=dt.datetime(2026, 10, 5, 9, 45, 0, 700000, tzinfo=UTC),
        ended_at=dt.datetime(2026, 10, 5, 11, 15, 30, 300000, tzinfo=UTC))
    RunIntervalSwitch.objects.create(interval=pod, at=dt.datetime(2026, 10, 5, 10, 10, 20, 900000, tzinfo=UTC), borrowed=True)
    RunIntervalSwitch.objects.create(interval=pod, at=dt.datetime(2026, 10, 5, 11, 0, tzinfo=UTC), borrowed=False)
    metering.rollups_refresh(until=dt.datetime(2026, 11, 1, tzinfo=UTC))

    assert workload_costs(workload_ids=[workload.pk])[workload.pk].cost == Decimal("7.56")
    figures = _page_figures(ready_team, dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 20, tzinfo=UTC))
    assert figures == dict.fromkeys(figures, (Decimal("3.02"), Decimal("7.56"))), figures
    account = selectors.account_for_team(team=ready_team)
    assert account is not None
    assert selectors.team_month_cost(account=account, month=dt.date(2026, 10, 1)) == (Decimal("7.56"), "USD")
    from billing.statements.services import statement_close

    statement = statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 20, tzinfo=UTC))
    (line,) = statement.lines.filter(kind="usage")
    assert (line.guaranteed_unit_seconds, line.borrowed_unit_seconds, line.amount) == (2 * 2450, 2 * 2980, Decimal("7.56"))
    assert line.borrowed_discount == "30 % off"
