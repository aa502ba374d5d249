"""The demo's history is recorded and metered as live runs are: run intervals whose guaranteed or
borrowed state follows the grants in force at each moment, rollups made by the metering refresh
(so `billing_verify` agrees), and the previous month closed into a statement with real lines
whatever the day of the month."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from billing.models import GuaranteeHour, Statement, StatementLine, UsageHour
from demo.history import Held, QuotaState, Ran, history_start, quota_states
from jobs.models import RunInterval, RunIntervalSwitch
from tenants.models import QuotaGrant

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def seeded() -> None:
    call_command("seed_demo", stdout=StringIO())


def _in_force(grants: list[QuotaGrant], team_id: int, flavor_id: int, instant: dt.datetime) -> int:
    units = 0
    for grant in grants:
        stops = [t for t in (grant.valid_until, grant.ended_at) if t is not None]
        if (grant.team_id, grant.flavor_id) == (team_id, flavor_id) and grant.valid_from <= instant and (
                not stops or instant < min(stops)):
            units += grant.units
    return units


# --- The rule, on its own --------------------------------------------------------------------------


def test_a_run_beyond_the_guarantee_borrows_and_switches_when_a_grant_starts_or_an_older_run_ends():
    key = (1, 1)
    runs = [Ran(key, 4, at("2026-10-01 00:00"), at("2026-10-01 10:00")),
            Ran(key, 2, at("2026-10-01 02:00"), at("2026-10-01 12:00")),
            Ran(key, 2, at("2026-10-01 03:00"), at("2026-10-01 04:00"))]
    held = [Held(key, 4, at("2026-09-01 00:00"), None), Held(key, 2, at("2026-10-01 05:00"), at("2026-10-01 08:00"))]

    assert quota_states(runs, held) == [
        QuotaState(borrowed=False),  # the oldest holds the guarantee
        # beyond 4 until the temporary grant; beyond again when it stops; inside once the oldest ends
        QuotaState(borrowed=True, switches=((at("2026-10-01 05:00"), False), (at("2026-10-01 08:00"), True),
                                            (at("2026-10-01 10:00"), False))),
        QuotaState(borrowed=True),
    ]


def test_another_teams_or_flavors_grant_covers_nothing():
    runs = [Ran((1, 1), 1, at("2026-10-01 00:00"), at("2026-10-01 01:00"))]
    assert quota_states(runs, [Held((2, 1), 8, at("2026-09-01 00:00"), None),
                               Held((1, 2), 8, at("2026-09-01 00:00"), None)]) == [QuotaState(borrowed=True)]


# --- The seeded history ----------------------------------------------------------------------------


def test_the_seeded_history_spans_last_month_whole_and_billing_verify_agrees(seeded):
    now = timezone.now()
    since = history_start(now)
    first_day = since.date()
    assert first_day.day == 1 and first_day < now.date().replace(day=1)
    first_hour = UsageHour.objects.order_by("hour").values_list("hour", flat=True).first()
    assert first_hour is not None and since <= first_hour < since + dt.timedelta(days=1)

    for month in (f"{first_day:%Y-%m}", f"{now:%Y-%m}"):
        out = StringIO()
        call_command("billing_verify", month=month, stdout=out)
        assert "equal a recomputation" in out.getvalue()


def test_no_seeded_hour_bills_more_guaranteed_quota_than_the_team_held_then(seeded):
    guaranteed = {(hour, account, flavor): total for hour, account, flavor, total in UsageHour.objects.filter(
        borrowed=False).values("hour", "account_id", "flavor_id").annotate(total=Sum("unit_seconds")).values_list(
        "hour", "account_id", "flavor_id", "total")}
    held = {(hour, account, flavor): seconds for hour, account, flavor, seconds in GuaranteeHour.objects.values_list(
        "hour", "account_id", "flavor_id", "unit_seconds")}

    over = {key: (seconds, held.get(key, 0)) for key, seconds in guaranteed.items() if seconds > held.get(key, 0)}
    assert guaranteed and not over, (
        f"{len(over)} hours bill more guaranteed unit-seconds than were held: {list(over.items())[:3]}")


def test_each_seeded_run_starts_borrowed_exactly_when_its_team_was_past_its_grant(seeded):
    grants = list(QuotaGrant.objects.all())
    intervals = [(i.pk, i.team_id, i.flavor_id, i.units, i.started_at, i.ended_at, i.borrowed, i.pod_uid)
                 for i in RunInterval.objects.order_by("started_at", "id")]
    for pk, team_id, flavor_id, _, started, _, borrowed, uid in intervals:
        assert team_id is not None
        # Admitted before it (or it): the oldest hold the guarantee first.
        running = 0
        for other_pk, other_team, other_flavor, units, other_started, other_ended, *_ in intervals:
            if ((other_team, other_flavor) == (team_id, flavor_id) and other_ended is not None
                    and other_started <= started < other_ended and (other_started, other_pk) <= (started, pk)):
                running += units
        held = _in_force(grants, team_id, flavor_id, started)
        assert borrowed == (running > held), (
            f"{uid}: {running} units running against {held} held, recorded {'borrowed' if borrowed else 'guaranteed'}")


def test_the_borrowed_share_is_not_zero_where_the_seeded_runs_exceed_the_teams_grant(seeded):
    sums = {(account, flavor, borrowed): total for account, flavor, borrowed, total in UsageHour.objects.values(
        "account__slug", "flavor__slug", "borrowed").annotate(total=Sum("unit_seconds")).values_list(
        "account__slug", "flavor__slug", "borrowed", "total")}
    # H100 runs on top of each other beyond 8 (vision) and 12 (nlp); recsys holds no H100 but the holiday grant.
    for team in ("vision", "nlp", "recsys"):
        assert sums.get((team, "h100-80gb", True), 0) > 0 and sums.get((team, "h100-80gb", False), 0) > 0, team
    # Within the grant, nothing borrows.
    assert not any(borrowed and total for (_, flavor, borrowed), total in sums.items() if flavor != "h100-80gb")


def test_a_run_across_a_grants_first_and_last_midnight_switches_there(seeded):
    holiday = QuotaGrant.objects.get(team__slug="recsys", flavor__slug="h100-80gb")
    switches = {(switch.at, switch.borrowed) for switch in RunIntervalSwitch.objects.filter(
        interval__team__slug="recsys", interval__flavor__slug="h100-80gb")}
    assert switches == {(holiday.valid_from, False), (holiday.valid_until, True)}


# --- Any day of the month --------------------------------------------------------------------------


@pytest.mark.parametrize("today", ["2026-10-01 09:30", "2026-10-28 15:00"])
def test_finance_opens_last_months_closed_statement_with_every_teams_lines_on_any_day(today, monkeypatch, client):
    monkeypatch.setattr("django.utils.timezone.now", lambda: at(today))
    call_command("seed_demo", stdout=StringIO())

    statement = Statement.objects.get()
    assert (statement.month, statement.sealed, statement.closed_by_name) == (dt.date(2026, 9, 1), True, "finance")
    lines = StatementLine.objects.filter(statement=statement, kind=StatementLine.Kind.USAGE)
    assert set(lines.values_list("account__slug", flat=True)) == {"vision", "nlp", "recsys"}
    assert statement.charged_total > 0 and lines.filter(borrowed_unit_seconds__gt=0).exists()
    september = UsageHour.objects.filter(hour__gte=at("2026-09-01 00:00"), hour__lt=at("2026-10-01 00:00"))
    assert {hour.day for hour in september.values_list("hour", flat=True)} == set(range(1, 31))
    call_command("billing_verify", month="2026-09", stdout=StringIO())

    client.login(username="finance", password="gpu-portal-demo")
    page = client.get("/billing/statements/")
    assert page.status_code == 200 and "September 2026" in page.content.decode()


def test_last_months_statement_keeps_each_teams_energy_as_its_gpu_hours_at_the_simulated_power(seeded):
    """The seeded runs draw what the simulated telemetry draws for a steady training: each unit its
    share of its card's power at 12 % + 80 % × 87.5 % of it (an H100 80GB unit 574 W, a quarter of a
    T4 14.35 W); the statement keeps each billed team's month of it."""
    from fractions import Fraction

    from billing.models import EnergyHour, EnergyState, StatementEnergy
    from billing.periods import hour_floor
    from tenants.catalog import unit_limits

    statement = Statement.objects.get()
    billed = set(StatementLine.objects.filter(statement=statement).exclude(account=None).values_list("account_slug",
                                                                                                     flat=True))
    energy = {row.account_slug: row for row in StatementEnergy.objects.filter(statement=statement)}
    assert billed and set(energy) == billed
    expected: dict[str, float] = {}
    for interval in RunInterval.objects.filter(started_at__lt=statement.period_end, ended_at__gt=statement.period_start):
        assert interval.ended_at is not None and interval.team is not None
        seconds = (min(interval.ended_at, statement.period_end) - max(interval.started_at, statement.period_start))
        unit = unit_limits(gpu_model_name=interval.flavor.gpu_model, resource_name=interval.resource_name,
                           fraction=Fraction(interval.fraction_numerator, interval.fraction_denominator))
        watts = unit.milliwatts / 1000 * (0.12 + 0.80 * 0.875) * interval.units
        expected[interval.team.slug] = expected.get(interval.team.slug, 0.0) + seconds.total_seconds() / 3600 * watts
    assert {slug: float(row.watt_hours) for slug, row in energy.items()} == pytest.approx(expected, rel=1e-4)
    for slug, row in energy.items():
        month = EnergyHour.objects.filter(account__slug=slug, hour__gte=statement.period_start,
                                          hour__lt=statement.period_end).aggregate(total=Sum("watt_hours"))["total"]
        assert row.watt_hours == month and row.kwh > 0
    assert EnergyState.objects.get().metered_through == hour_floor(timezone.now())
