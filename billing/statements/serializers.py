"""What the statements API reads and answers: closed months, their teams' parts, lines and
adjustments, with money at the statement currency's minor unit (billing.serializers.MoneyField)."""

from __future__ import annotations

from rest_framework import serializers

from billing.models import Adjustment, Statement, StatementLine
from billing.serializers import MoneyField
from portal.adapters import StrictInputMixin

MONTH_PATTERN = r"[0-9]{4}-[0-9]{2}"


class StatementSerializer(serializers.ModelSerializer):
    month = serializers.CharField(source="slug", read_only=True, help_text="YYYY-MM.")

    class Meta:
        model = Statement
        fields = ["month", "label", "currency", "time_zone", "period_start", "period_end", "closed_at", "closed_by_name"]
        read_only_fields = fields


class TeamPartSerializer(serializers.Serializer):
    team = serializers.CharField(source="slug")
    name = serializers.CharField()
    cost_center = serializers.CharField()
    department = serializers.CharField(help_text="Its department's name when the month closed; empty for none.")
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    charged = MoneyField(help_text="The sum of the team's rounded lines.")
    adjusted = MoneyField(help_text="The sum of its adjustments (credits are negative).")
    total = MoneyField(help_text="Its lines and adjustments: what it is charged.")
    kwh = serializers.DecimalField(max_digits=18, decimal_places=2, source="energy.kwh", allow_null=True, default=None,
                                   help_text="Its GPUs' energy in the month (null: none metered).")
    kg_co2e = serializers.DecimalField(max_digits=18, decimal_places=2, source="energy.kg_co2e", allow_null=True,
                                       default=None, help_text="At the emission factor of the day the month closed; "
                                                               "null without one.")


class DepartmentPartSerializer(serializers.Serializer):
    department = serializers.CharField(help_text="Its name as the month closed; empty for the teams in none.")
    teams = serializers.IntegerField(help_text="How many teams on the statement were in it.")
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    charged = MoneyField(help_text="The sum of its teams' rounded lines.")
    adjusted = MoneyField(help_text="The sum of its teams' adjustments.")
    total = MoneyField(help_text="The sum of its teams' totals.")


class StatementDetailSerializer(serializers.Serializer):
    statement = StatementSerializer()
    teams = TeamPartSerializer(many=True)
    departments = DepartmentPartSerializer(
        many=True, help_text="Per department its teams were in at close, the teams in none last (department empty); "
                             "they add up to the total. Empty where no team was in a department.")
    charged = MoneyField(help_text="Lines charged to the teams shown.")
    adjusted = MoneyField()
    total = MoneyField(help_text="The sum of the teams' totals.")
    unallocated_total = MoneyField(allow_null=True, help_text="Capacity nobody used (finance's whole view only).")
    kwh = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="The sum of the teams' kWh shown.")
    kg_co2e = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True,
                                       help_text="The sum of the teams' kg CO₂e shown; null without an emission factor.")


class StatementLineSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="account_slug", read_only=True)
    team_name = serializers.CharField(source="account_name", read_only=True)
    flavor = serializers.CharField(source="flavor_slug", read_only=True)
    amount = MoneyField(help_text="Rounded once, half-even, to the currency's minor unit.")

    class Meta:
        model = StatementLine
        fields = ["kind", "team", "team_name", "cost_center", "department", "flavor", "flavor_name", "period_start", "period_end",
                  "fraction_numerator", "fraction_denominator", "guaranteed_unit_seconds", "borrowed_unit_seconds",
                  "guaranteed_gpu_hours", "borrowed_gpu_hours", "price_per_gpu_hour", "borrowed_discount_percent", "amount"]
        read_only_fields = fields


class AdjustmentSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="account_slug", read_only=True)
    amount = MoneyField(help_text="A charge, or a credit when negative.")

    class Meta:
        model = Adjustment
        fields = ["id", "team", "cost_center", "department", "amount", "reason", "created_at", "created_by_name"]
        read_only_fields = fields


class CloseSerializer(StrictInputMixin, serializers.Serializer):
    month = serializers.RegexField(MONTH_PATTERN, help_text="The month to close, YYYY-MM; it must have ended.",
                                   error_messages={"invalid": "Write the month as YYYY-MM, for example 2026-10."})


class AdjustmentCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = serializers.CharField(help_text="The slug of a team on the statement.")
    amount = serializers.CharField(help_text="Money in the statement's currency, e.g. \"-120.50\" (negative for a credit).")
    reason = serializers.CharField(allow_blank=True, help_text="What it corrects; required.")
