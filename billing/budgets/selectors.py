"""Reads for budgets: where a team stands against its budget this month, and what may be seen.

Month-to-date cost and the forecast come from `billing.usage.forecast.month_forecasts` (the usage
pages show the same numbers); this module turns them into the budget's picture and its sentences,
and answers the apps to billing's left: which teams' queues a hard stop holds, and why a launch is
refused.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet
from django.utils import timezone

from billing import money, periods
from billing.models import Account, AlertEmailPreference, Budget, BudgetAlert
from billing.usage.forecast import month_forecasts
from portal.errors import DomainError
from portal.models import User
from tenants.models import Team


def money_text(amount: Decimal, currency: str) -> str:
    """4,820.00 USD: grouped, with the currency's minor unit."""
    return f"{amount:,.{money.minor_unit(currency)}f} {currency}"


def ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


@dataclass(frozen=True)
class BudgetStatus:
    team_slug: str
    month: dt.date
    amount: Decimal
    currency: str
    spent: Decimal
    spent_currency: str
    forecast: Decimal
    over_on: dt.date | None  # the day the forecast crosses the budget, when that is within the month
    hard_stop: bool
    held: bool
    problem: str = ""  # why the month's cost cannot be read (rates in two currencies)

    @property
    def comparable(self) -> bool:
        """Costs in another currency than the budget's cannot be compared without an exchange rate."""
        return not self.problem and (self.spent_currency == self.currency or self.spent == 0)

    @property
    def percent(self) -> int:
        """Whole percent used, rounded down (49.99 % has not reached 50 %)."""
        return int(self.spent * 100 // self.amount) if self.comparable else 0

    @property
    def percent_shown(self) -> str:
        """Percent used to a tenth, rounded down, as the pages write it: 62.78 % reads 62.7 (not
        62), 50 % reads 50, and 49.99 % never reads 50."""
        tenths = int(self.spent * 1000 // self.amount) if self.comparable else 0
        whole, tenth = divmod(tenths, 10)
        return f"{whole}.{tenth}" if tenth else f"{whole}"

    @property
    def bar_percent(self) -> int:
        return min(self.percent, 100)

    @property
    def over(self) -> bool:
        return self.comparable and self.spent >= self.amount

    @property
    def forecast_over(self) -> bool:
        return self.comparable and self.forecast > self.amount

    @property
    def month_name(self) -> str:
        return self.month.strftime("%B %Y")

    @property
    def used_sentence(self) -> str:
        return (f"{money_text(self.spent, self.currency)} of {money_text(self.amount, self.currency)} "
                f"used in {self.month_name} ({self.percent_shown} %)")

    @property
    def forecast_sentence(self) -> str:
        if self.problem:
            return self.problem
        if not self.comparable:
            return (f"Costs are in {self.spent_currency} and the budget in {self.currency}: "
                    "ask finance to set the budget in the currency of the rates.")
        if self.spent == 0:
            return "Nothing spent yet this month."
        if self.over:
            return f"at this rate: {money_text(self.forecast, self.currency)}, already over budget"
        if self.over_on is not None:
            return f"at this rate: {money_text(self.forecast, self.currency)}, over budget on the {ordinal(self.over_on.day)}"
        return f"at this rate: {money_text(self.forecast, self.currency)}, within budget"


def hold_at_once(*, team: Team, amount: Decimal, currency: str, hard_stop: bool) -> BudgetStatus | None:
    """Where the team would stand under a hard-stopped budget of `amount` it has already spent
    (it would be held at once: nothing new starts), for the page to confirm first; None when such
    a budget would not hold it, or it is held already."""
    if not hard_stop:
        return None
    account = Account.for_team(team)
    current = Budget.objects.filter(account=account).first()
    if current is not None and current.held:
        return None
    status = budget_status(budget=Budget(account=account, amount=amount, currency=currency, hard_stop=True))
    return status if status.over else None


def budget_status(*, budget: Budget, now: dt.datetime | None = None) -> BudgetStatus:
    """Where the team stands this month: spent so far and the forecast at the current burn
    (`billing.usage.forecast.month_forecasts`, two grouped queries), with the day it crosses the budget."""
    return budget_statuses(budgets=[budget], now=now)[budget.pk]


def budget_statuses(*, budgets: list[Budget], now: dt.datetime | None = None) -> dict[int, BudgetStatus]:
    """`budget_status` of every budget by its id, in the same queries however many there are."""
    now = now or timezone.now()
    month = periods.current_month(now)
    forecasts = month_forecasts(accounts=[budget.account for budget in budgets], month=month, now=now)
    statuses: dict[int, BudgetStatus] = {}
    for budget in budgets:
        forecast = forecasts[budget.account_id]
        if isinstance(forecast, DomainError):
            statuses[budget.pk] = BudgetStatus(
                team_slug=budget.account.slug, month=month, amount=budget.amount, currency=budget.currency,
                spent=Decimal(0), spent_currency=budget.currency, forecast=Decimal(0), over_on=None,
                hard_stop=budget.hard_stop, held=budget.held, problem=forecast.message)
            continue
        over_on = forecast.crossing_date(budget.amount) if forecast.spent < budget.amount else None
        statuses[budget.pk] = BudgetStatus(
            team_slug=budget.account.slug, month=month, amount=budget.amount, currency=budget.currency,
            spent=forecast.spent, spent_currency=forecast.currency, forecast=forecast.projected, over_on=over_on,
            hard_stop=budget.hard_stop, held=budget.held,
        )
    return statuses


def team_budget(*, team: Team) -> Budget | None:
    return Budget.objects.select_related("account", "set_by").filter(account__team=team).first()


def budgets_for_user(user: User | AnonymousUser) -> QuerySet[Budget]:
    """Budgets of the teams the user may see: their own teams, or all for finance and admins."""
    return Budget.objects.select_related("account", "account__team", "set_by").filter(
        account__team__in=Team.objects.for_user(user))


def alerts_for_user(user: User | AnonymousUser) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.select_related("account").filter(account__team__in=Team.objects.for_user(user))


def alert_email_digest(*, user: User) -> bool:
    return AlertEmailPreference.objects.filter(user=user, daily_digest=True).exists()


def launch_refusal(*, team: Team) -> str | None:
    """Why the team may not launch now, or None: a hard stop at 100 % of this month's budget."""
    budget = Budget.objects.select_related("account").filter(account__team=team, hard_stop=True).first()
    if budget is None:
        return None
    status = budget_status(budget=budget)
    if not status.over:
        return None
    return (f"{team.slug} has spent {money_text(status.spent, status.currency)} of its "
            f"{money_text(status.amount, status.currency)} budget for {status.month_name} ({status.percent_shown} %), and its "
            "budget has a hard stop: no new launches until finance or a platform admin raises the budget, or the month "
            "ends. Running workloads continue.")


def held_team_ids(team_ids: list[int]) -> set[int]:
    """The teams whose LocalQueue is held by a hard stop (the team's desired state asks this)."""
    return set(Budget.objects.filter(held=True, account__team_id__in=team_ids).values_list("account__team_id", flat=True))
