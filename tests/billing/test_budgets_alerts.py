"""Budget alerts: each threshold once per month (and again the next month), to the leads and to
finance at 100 %, in-app and by email, or in one digest a day for those who asked for it; the
forecast alert; setting a budget is for finance and platform admins, with refusals in words."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied

from billing.budgets import services as budgets
from billing.budgets.selectors import budget_status
from billing.models import Budget, BudgetAlert, DigestEntry
from portal.errors import DomainError
from portal.models import AuditEvent, Notification
from tests.billing.budget_helpers import UTC, priced, use

pytestmark = pytest.mark.django_db

# The forecast burns at the last 24 hours' rate: usage older than a day forecasts no more spending.
LATE = dt.datetime(2026, 11, 29, 12, tzinfo=UTC)
MID = dt.datetime(2026, 11, 15, 12, tzinfo=UTC)


@pytest.fixture
def budget(team, lead, finance_user, admin_user, flavor):
    priced(flavor)
    return budgets.budget_set(actor=finance_user, team=team, amount="1000", currency="USD")


def thresholds(team) -> list[tuple[str, str]]:
    return sorted((a.month.isoformat(), a.threshold) for a in BudgetAlert.objects.filter(account__team=team))


def check(now, capture):
    with capture(execute=True):
        return budgets.budgets_check(now=now)


def test_each_threshold_alerts_once_a_month_and_again_the_next_month(budget, team, lead, flavor,
                                                                    django_capture_on_commit_callbacks):
    use(team, flavor, gpu_hours=49, at=LATE - dt.timedelta(days=3))
    assert check(LATE, django_capture_on_commit_callbacks).alerts == []  # 490 of 1000: 49 %, not yet 50 %

    use(team, flavor, gpu_hours=1, at=LATE - dt.timedelta(days=3))
    assert [a.threshold for a in check(LATE, django_capture_on_commit_callbacks).alerts] == ["50"]
    assert check(LATE, django_capture_on_commit_callbacks).alerts == []  # the same check again sends nothing
    (note,) = Notification.objects.filter(recipient=lead)
    assert note.message == "vision has spent 500.00 USD of its 1,000.00 USD budget for November 2026 (50 %)."
    assert note.url == "/billing/budgets/vision/"
    assert [m.to for m in mail.outbox] == [["lena@example.com"]] and "500.00 USD" in mail.outbox[0].body

    use(team, flavor, gpu_hours=30, at=LATE - dt.timedelta(days=2))
    assert [a.threshold for a in check(LATE, django_capture_on_commit_callbacks).alerts] == ["80"]
    assert check(LATE + dt.timedelta(hours=5), django_capture_on_commit_callbacks).alerts == []
    assert Notification.objects.filter(recipient=lead).count() == 2

    december = dt.datetime(2026, 12, 20, 12, tzinfo=UTC)
    use(team, flavor, gpu_hours=25, at=december - dt.timedelta(days=2))  # 250 USD in December: 25 %
    assert check(december, django_capture_on_commit_callbacks).alerts == []
    use(team, flavor, gpu_hours=26, at=december - dt.timedelta(days=2))  # 510 USD: 51 %, nothing in the last day
    assert [a.threshold for a in check(december, django_capture_on_commit_callbacks).alerts] == ["50"]
    assert thresholds(team) == [("2026-11-01", "50"), ("2026-11-01", "80"), ("2026-12-01", "50")]


def test_crossing_every_threshold_at_once_is_one_alert_about_the_highest_and_finance_hears_of_100(
        budget, team, lead, finance_user, flavor, django_capture_on_commit_callbacks):
    use(team, flavor, gpu_hours=120, at=LATE - dt.timedelta(days=1))
    result = check(LATE, django_capture_on_commit_callbacks)
    assert sorted(a.threshold for a in result.alerts) == ["100", "50", "80", "forecast"]
    assert Notification.objects.filter(recipient=lead).count() == 1  # the lower ones are recorded, not sent late
    (to_finance,) = Notification.objects.filter(recipient=finance_user)
    assert to_finance.message == "vision has spent 1,200.00 USD, all of its 1,000.00 USD budget for November 2026 (120 %)."
    assert sorted(address for m in mail.outbox for address in m.to) == ["fiona@example.com", "lena@example.com"]
    assert check(LATE, django_capture_on_commit_callbacks).alerts == []


def test_a_lower_threshold_goes_to_leads_only_not_to_finance(budget, team, lead, finance_user, flavor,
                                                              django_capture_on_commit_callbacks):
    use(team, flavor, gpu_hours=85, at=LATE - dt.timedelta(days=2))
    check(LATE, django_capture_on_commit_callbacks)
    assert Notification.objects.filter(recipient=lead).count() == 1
    assert not Notification.objects.filter(recipient=finance_user).exists()


def test_the_forecast_alert_says_when_the_month_will_go_over(budget, team, lead, flavor, django_capture_on_commit_callbacks):
    # 600 USD in the last 24 hours: 25 USD an hour for the 372 hours left is 9,900 USD by the month's
    # end, and the 400 USD left of the budget last 16 hours: over on the 16th.
    use(team, flavor, gpu_hours=60, at=MID - dt.timedelta(days=1))
    status = budget_status(budget=Budget.objects.get(), now=MID)
    assert status.forecast == Decimal("9900.00") and status.over_on == dt.date(2026, 11, 16)
    assert status.forecast_sentence == "at this rate: 9,900.00 USD, over budget on the 16th"
    assert sorted(a.threshold for a in check(MID, django_capture_on_commit_callbacks).alerts) == ["50", "forecast"]
    messages = sorted(Notification.objects.filter(recipient=lead).values_list("message", flat=True))
    assert messages == [
        ("At this rate vision will spend 9,900.00 USD in November 2026, over its 1,000.00 USD budget on the 16th; "
         "600.00 USD is spent so far."),
        "vision has spent 600.00 USD of its 1,000.00 USD budget for November 2026 (60 %).",
    ]
    assert check(MID + dt.timedelta(hours=1), django_capture_on_commit_callbacks).alerts == []


def test_a_quiet_day_forecasts_no_more_than_is_spent(budget, team, lead, flavor, django_capture_on_commit_callbacks):
    use(team, flavor, gpu_hours=60, at=MID - dt.timedelta(days=2))
    status = budget_status(budget=Budget.objects.get(), now=MID)
    assert (status.forecast, status.over_on) == (Decimal("600.00"), None)
    assert status.forecast_sentence == "at this rate: 600.00 USD, within budget"
    assert [a.threshold for a in check(MID, django_capture_on_commit_callbacks).alerts] == ["50"]


def test_a_lead_with_the_daily_digest_gets_the_bell_at_once_and_one_email_a_day(
        budget, team, lead, flavor, settings, django_capture_on_commit_callbacks):
    settings.BUDGET_DIGEST_HOUR = 8
    budgets.alert_email_preference_set(user=lead, daily_digest=True)
    use(team, flavor, gpu_hours=55, at=LATE - dt.timedelta(days=2))
    check(LATE, django_capture_on_commit_callbacks)
    use(team, flavor, gpu_hours=30, at=LATE - dt.timedelta(days=2))
    check(LATE + dt.timedelta(hours=1), django_capture_on_commit_callbacks)
    assert Notification.objects.filter(recipient=lead).count() == 2  # in-app: immediate
    assert mail.outbox == []  # no email per alert

    next_morning = dt.datetime(2026, 11, 30, 7, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budget_digests_send(now=next_morning) == 0  # before BUDGET_DIGEST_HOUR
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budget_digests_send(now=next_morning.replace(hour=9)) == 1
    (digest,) = mail.outbox
    assert digest.to == ["lena@example.com"] and "2 budget alerts" in digest.subject
    assert "(55 %)" in digest.body and "(85 %)" in digest.body
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budget_digests_send(now=next_morning.replace(hour=15)) == 0  # once a day
    assert not DigestEntry.objects.filter(sent_at__isnull=True).exists()

    use(team, flavor, gpu_hours=20, at=next_morning)
    check(next_morning.replace(hour=16), django_capture_on_commit_callbacks)  # 100 %
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budget_digests_send(now=next_morning.replace(hour=20)) == 0  # that day's digest went already
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budget_digests_send(now=dt.datetime(2026, 12, 1, 8, tzinfo=UTC)) == 1
    to_lead = [m for m in mail.outbox if m.to == ["lena@example.com"]]
    assert len(to_lead) == 2 and "(105 %)" in to_lead[1].body
    assert [m.to for m in mail.outbox if m not in to_lead] == [["fiona@example.com"]]  # finance has no digest


def test_people_without_the_digest_still_get_each_email(budget, team, lead, flavor, django_capture_on_commit_callbacks):
    other_lead = lead.__class__.objects.create_user("lars", email="lars@example.com")
    team.memberships.create(user=other_lead, role="lead")
    budgets.alert_email_preference_set(user=lead, daily_digest=True)
    use(team, flavor, gpu_hours=55, at=LATE - dt.timedelta(days=2))
    check(LATE, django_capture_on_commit_callbacks)
    assert [m.to for m in mail.outbox] == [["lars@example.com"]]
    assert Notification.objects.filter(recipient__in=[lead, other_lead]).count() == 2


def test_setting_a_budget_is_for_finance_and_platform_admins_and_is_audited(team, lead, member, finance_user, admin_user):
    for person in (lead, member):
        with pytest.raises(PermissionDenied):
            budgets.budget_set(actor=person, team=team, amount="100")
    budgets.budget_set(actor=finance_user, team=team, amount="1000", currency="usd")
    budgets.budget_set(actor=admin_user, team=team, amount="2500.50", currency="EUR", hard_stop=True)
    budget = Budget.objects.get()
    assert (budget.amount, budget.currency, budget.hard_stop, budget.set_by) == (Decimal("2500.50"), "EUR", True, admin_user)
    events = AuditEvent.objects.filter(action="budget.set").order_by("created_at", "id")
    assert list(events.values_list("message", flat=True)) == [
        "fiona set the monthly budget of vision to 1,000.00 USD",
        "root set the monthly budget of vision to 2,500.50 EUR with a hard stop (was 1,000.00 USD)",
    ]


@pytest.mark.parametrize(("amount", "currency", "message"), [
    ("lots", "USD", "“lots” is not an amount; give a number such as 10000 or 12500.50."),
    ("NaN", "USD", "“NaN” is not an amount"),
    ("Infinity", "USD", "“Infinity” is not an amount"),
    ("0", "USD", "A budget is more than zero"),
    ("-5", "USD", "A budget is more than zero"),
    ("10.001", "USD", "An amount for a budget has at most 2 decimals; “10.001” has more."),
    ("1e20", "USD", "An amount for a budget is at most 999,999,999,999.99; “1e20” is more."),
    ("100", "US", "The currency is a three-letter code such as USD or EUR."),
    ("100", "ÜSD", "The currency is a three-letter code"),
])
def test_a_bad_budget_is_refused_in_words_and_nothing_is_written(team, finance_user, amount, currency, message):
    with pytest.raises(DomainError) as refusal:
        budgets.budget_set(actor=finance_user, team=team, amount=amount, currency=currency)
    assert message in refusal.value.message
    assert not Budget.objects.exists() and not AuditEvent.objects.filter(action="budget.set").exists()


def test_costs_in_another_currency_than_the_budget_are_not_compared(team, lead, finance_user, flavor,
                                                                    django_capture_on_commit_callbacks):
    priced(flavor)
    budget = budgets.budget_set(actor=finance_user, team=team, amount="100", currency="EUR", hard_stop=True)
    use(team, flavor, gpu_hours=50, at=LATE - dt.timedelta(days=1))
    assert check(LATE, django_capture_on_commit_callbacks).alerts == []
    status = budget_status(budget=budget, now=LATE)
    assert not status.over and "Costs are in USD and the budget in EUR" in status.forecast_sentence


def test_usage_priced_in_two_currencies_is_said_in_words_and_neither_alerts_nor_stops(
        team, lead, finance_user, flavor, django_capture_on_commit_callbacks):
    from billing.models import Rate
    from tests.factories import FlavorFactory

    priced(flavor)
    euro_flavor = FlavorFactory.create(slug="l40s", name="L40S")
    Rate.objects.create(flavor=euro_flavor, price_per_gpu_hour=Decimal(3), currency="EUR",
                        effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    budget = budgets.budget_set(actor=finance_user, team=team, amount="10", currency="USD", hard_stop=True)
    use(team, flavor, gpu_hours=50, at=LATE - dt.timedelta(days=2))
    use(team, euro_flavor, gpu_hours=50, at=LATE - dt.timedelta(days=2))
    assert check(LATE, django_capture_on_commit_callbacks).alerts == []
    status = budget_status(budget=budget, now=LATE)
    assert not status.over and "priced in EUR and USD" in status.forecast_sentence
