"""What the budgets API reads and answers: a budget with where it stands this month, the body
that sets one, and the alerts sent."""

from __future__ import annotations

from rest_framework import serializers

from billing.budgets import selectors
from billing.models import Budget, BudgetAlert
from portal.adapters import StrictInputMixin


class BudgetSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="account.slug", read_only=True)
    set_by = serializers.CharField(source="set_by.username", read_only=True, default=None)
    month = serializers.SerializerMethodField()
    spent = serializers.SerializerMethodField()
    percent = serializers.SerializerMethodField()
    forecast = serializers.SerializerMethodField()
    forecast_sentence = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = ["team", "amount", "currency", "hard_stop", "held", "set_by", "set_at", "month", "spent", "percent",
                  "forecast", "forecast_sentence"]

    def _status(self, budget: Budget) -> selectors.BudgetStatus:
        statuses: dict[int, selectors.BudgetStatus] = self.context["statuses"]
        if budget.pk not in statuses:  # one budget, outside a list
            statuses.update(selectors.budget_statuses(budgets=[budget]))
        return statuses[budget.pk]

    def get_month(self, budget: Budget) -> str:
        return self._status(budget).month.strftime("%Y-%m")

    def get_spent(self, budget: Budget) -> str:
        return str(self._status(budget).spent)

    def get_percent(self, budget: Budget) -> int:
        return self._status(budget).percent

    def get_forecast(self, budget: Budget) -> str:
        return str(self._status(budget).forecast)

    def get_forecast_sentence(self, budget: Budget) -> str:
        return self._status(budget).forecast_sentence


class BudgetWriteSerializer(StrictInputMixin, serializers.Serializer):
    amount = serializers.CharField(help_text="The month's budget, e.g. \"10000\" or \"12500.50\".")
    currency = serializers.CharField(default="USD", help_text="A three-letter code such as USD or EUR.")
    hard_stop = serializers.BooleanField(default=False, help_text="At 100 % refuse new launches and hold the team's queue.")


class BudgetAlertSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="account.slug", read_only=True)

    class Meta:
        model = BudgetAlert
        fields = ["id", "team", "month", "threshold", "sent_at", "spent", "budget_amount", "currency", "message"]
