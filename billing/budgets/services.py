"""Budgets: finance and platform admins set a team's monthly budget; a periodic check sends
each alert once per threshold per month (50 %, 80 %, 100 %, and when the forecast ends the month
over budget) to the team's leads, and to finance at 100 %; a team with a hard stop has new
launches refused and its LocalQueue held (Kueue's `stopPolicy: Hold`) while it is over budget.

People who chose the daily digest get alerts in-app at once and by email once a day.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from billing import periods
from billing.budgets import selectors
from billing.budgets.selectors import BudgetStatus, budget_status, money_text, ordinal
from billing.models import Account, AlertEmailPreference, Budget, BudgetAlert, DigestEntry
from billing.money import money_input
from portal.audit import audit_record
from portal.errors import DomainError
from portal.models import User
from portal.notifications import email_after_commit, notify
from portal.tasks import send_on_commit
from tenants import selectors as tenant_selectors
from tenants.models import Team

log = logging.getLogger(__name__)

Threshold = BudgetAlert.Threshold
PERCENT_THRESHOLDS = ((Threshold.HALF, 50), (Threshold.EIGHTY, 80), (Threshold.FULL, 100))


def _amount(value: Any) -> Decimal:
    amount = money_input(value, column=Budget._meta.get_field("amount"), field="amount", noun="amount",
                         unit=" for a budget", example="10000 or 12500.50")
    if amount <= 0:
        raise DomainError("A budget is more than zero; a team without a budget simply has none.", field="amount")
    return amount


def _currency(value: str) -> str:
    currency = (value or "").strip().upper()
    if len(currency) != 3 or not currency.isascii() or not currency.isalpha():
        raise DomainError("The currency is a three-letter code such as USD or EUR.", field="currency")
    return currency


def budget_hold_preview(*, team: Team, amount: Any, currency: str = "USD", hard_stop: bool = False) -> BudgetStatus | None:
    """Where the team would stand if this budget held it at once (a hard stop below what it has
    already spent this month), for a page to confirm first; None when it would not. Bad input is
    refused as budget_set refuses it."""
    return selectors.hold_at_once(team=team, amount=_amount(amount), currency=_currency(currency),
                                         hard_stop=bool(hard_stop))


@transaction.atomic
def budget_set(*, actor: User, team: Team, amount: Any, currency: str = "USD", hard_stop: bool = False) -> Budget:
    """Sets (or changes) the team's monthly budget. Raising it above what is spent, or turning
    the hard stop off, lifts a hold at once."""
    if not actor.has_perm("billing.set_budgets"):
        raise PermissionDenied
    value, code = _amount(amount), _currency(currency)
    account = Account.for_team(team)
    budget = Budget.objects.select_for_update().filter(account=account).first()
    before = (budget.amount, budget.currency, budget.hard_stop) if budget else None
    if budget is None:
        budget = Budget(account=account)
    budget.amount, budget.currency, budget.hard_stop = value, code, bool(hard_stop)
    budget.set_by, budget.set_at = actor, timezone.now()
    budget.save()
    stop = " with a hard stop" if budget.hard_stop else ""
    was = f" (was {money_text(before[0], before[1])}{' with a hard stop' if before[2] else ''})" if before else ""
    audit_record(actor=actor, action="budget.set", obj=budget, team_id=team.pk,
                 message=f"{actor.username} set the monthly budget of {team.slug} to {money_text(value, code)}{stop}{was}",
                 data={"amount": str(value), "currency": code, "hard_stop": budget.hard_stop})
    _hold_follow(budget, budget_status(budget=budget))
    return budget


def _hold_follow(budget: Budget, status: BudgetStatus) -> bool:
    """Records whether the hard stop is in force and, when that changed, reconciles the team so
    its LocalQueue follows. Returns whether it changed."""
    held = budget.hard_stop and status.over
    if held == budget.held:
        return False
    Budget.objects.filter(pk=budget.pk).update(held=held)
    budget.held = held
    team_id = budget.account.team_id
    if team_id is not None:
        send_on_commit("tenants.tasks.team_reconcile", team_id)
    return True


@dataclass
class CheckResult:
    alerts: list[BudgetAlert] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)


def budgets_check(*, now: dt.datetime | None = None) -> CheckResult:
    """The periodic check: alerts due this month and the hold of hard-stopped teams. Safe to run
    twice or concurrently: the alert's unique key lets only one check send it."""
    now = now or timezone.now()
    result = CheckResult()
    for budget_id in Budget.objects.filter(account__team__isnull=False).values_list("pk", flat=True):
        _budget_check(budget_id=budget_id, now=now, result=result)
    return result


@transaction.atomic
def _budget_check(*, budget_id: int, now: dt.datetime, result: CheckResult) -> None:
    # Checks of one budget queue behind each other; the unique key stays the guarantee.
    budget = Budget.objects.select_for_update(of=("self",)).select_related("account", "account__team").get(pk=budget_id)
    team = budget.account.team
    if team is None:
        return
    status = budget_status(budget=budget, now=now)
    if _hold_follow(budget, status):
        (result.held if budget.held else result.released).append(team.slug)
    if not status.comparable:
        return
    due = [threshold for threshold, percent in PERCENT_THRESHOLDS if status.percent >= percent]
    if status.forecast_over:
        due.append(Threshold.FORECAST)
    new = _alerts_record(budget=budget, team=team, status=status, due=due, now=now) if due else []
    if not new:
        return
    result.alerts.extend(new)
    # Crossing several thresholds at once (a big job, or the first check after setting a budget)
    # is one alert about the highest; the others are recorded so they never arrive late. The
    # forecast is news of its own, unless the budget is already used up.
    crossed = [alert for alert in new if alert.threshold != Threshold.FORECAST]
    if crossed:
        highest = max(crossed, key=lambda alert: int(alert.threshold))
        _alert_deliver(team=team, alert=highest, to_finance=highest.threshold == Threshold.FULL)
    forecast = next((alert for alert in new if alert.threshold == Threshold.FORECAST), None)
    if forecast is not None and not status.over:
        _alert_deliver(team=team, alert=forecast, to_finance=False)


def _alerts_record(*, budget: Budget, team: Team, status: BudgetStatus, due: list[Threshold],
                   now: dt.datetime) -> list[BudgetAlert]:
    """The alerts due this month not sent yet, recorded; one another check recorded first is left to it."""
    already = set(BudgetAlert.objects.filter(account=budget.account, month=status.month).values_list("threshold", flat=True))
    new: list[BudgetAlert] = []
    for threshold in due:
        if threshold in already:
            continue
        try:
            with transaction.atomic():
                new.append(BudgetAlert.objects.create(
                    account=budget.account, month=status.month, threshold=threshold, sent_at=now, spent=status.spent,
                    budget_amount=status.amount, currency=status.currency, message=alert_message(team, status, threshold)))
        except IntegrityError:
            continue  # another check sent it first
    return new


def alert_message(team: Team, status: BudgetStatus, threshold: str) -> str:
    budget_text = money_text(status.amount, status.currency)
    spent_text = money_text(status.spent, status.currency)
    if threshold == Threshold.FORECAST:
        when = f" on the {ordinal(status.over_on.day)}" if status.over_on else ""
        return (f"At this rate {team.slug} will spend {money_text(status.forecast, status.currency)} in {status.month_name}, "
                f"over its {budget_text} budget{when}; {spent_text} is spent so far.")
    if threshold == Threshold.FULL:
        stop = (" New launches are refused and its queue admits nothing new until finance or a platform admin "
                "raises the budget or the month ends; running workloads continue.") if status.hard_stop else ""
        return (f"{team.slug} has spent {spent_text}, all of its {budget_text} budget for {status.month_name} "
                f"({status.percent_shown} %).{stop}")
    return f"{team.slug} has spent {spent_text} of its {budget_text} budget for {status.month_name} ({status.percent_shown} %)."


def _alert_deliver(*, team: Team, alert: BudgetAlert, to_finance: bool) -> None:
    recipients: dict[int, User] = {lead.pk: lead for lead in tenant_selectors.team_leads(team_ids=[team.pk])[team.pk]}
    if to_finance:
        recipients.update({user.pk: user for user in User.objects.filter(is_finance=True, is_active=True)})
    people = list(recipients.values())
    digest_ids = set(AlertEmailPreference.objects.filter(user__in=people, daily_digest=True).values_list("user_id", flat=True))
    url = reverse("billing:budget-detail", args=[team.slug])
    subject = f"Budget of {team.slug}: {alert.get_threshold_display()}"
    notify(recipients=[p for p in people if p.pk not in digest_ids], message=alert.message, url=url, subject=subject)
    digest = [p for p in people if p.pk in digest_ids and p.is_active]
    notify(recipients=digest, message=alert.message, url=url, email=False)
    DigestEntry.objects.bulk_create([DigestEntry(recipient=p, message=alert.message, url=url) for p in digest])


def budget_digests_send(*, now: dt.datetime | None = None) -> int:
    """One email a day to each person with budget alerts waiting for their digest. Returns how
    many emails were sent; running it again the same day sends nothing."""
    now = now or timezone.now()
    if now.astimezone(periods.billing_zone()).hour < settings.BUDGET_DIGEST_HOUR:
        return 0
    today = periods.local_date(now)
    sent = 0
    waiting = DigestEntry.objects.filter(sent_at__isnull=True).values_list("recipient_id", flat=True).distinct()
    for recipient_id in list(waiting):
        sent += _digest_send(recipient_id=recipient_id, today=today, now=now)
    return sent


@transaction.atomic
def _digest_send(*, recipient_id: int, today: dt.date, now: dt.datetime) -> int:
    preference, _ = AlertEmailPreference.objects.get_or_create(user_id=recipient_id)
    preference = AlertEmailPreference.objects.select_for_update().select_related("user").get(pk=preference.pk)
    if preference.last_digest_on is not None and preference.last_digest_on >= today:
        return 0
    entries = list(DigestEntry.objects.filter(recipient_id=recipient_id, sent_at__isnull=True).order_by("created_at", "id"))
    if not entries:
        return 0
    user = preference.user
    DigestEntry.objects.filter(pk__in=[e.pk for e in entries]).update(sent_at=now)
    preference.last_digest_on = today
    preference.save(update_fields=["last_digest_on"])
    if not (user.is_active and user.email):
        return 0
    lines = [f"- {e.message}" + (f"\n  {settings.SITE_URL}{e.url}" if e.url else "") for e in entries]
    count = f"{len(entries)} budget alert{'s' if len(entries) != 1 else ''}"
    email_after_commit(subject=f"Budget digest for {today:%d %B %Y}: {count}",
                       body=f"{count} since your last digest:\n\n" + "\n".join(lines), addresses=[user.email])
    return 1


@transaction.atomic
def alert_email_preference_set(*, user: User, daily_digest: bool) -> AlertEmailPreference:
    preference, _ = AlertEmailPreference.objects.select_for_update().get_or_create(user=user)
    preference.daily_digest = bool(daily_digest)
    preference.save(update_fields=["daily_digest"])
    return preference
