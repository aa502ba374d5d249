"""What the usage API reads and answers: the period and grouping asked, the rows with their
GPU-hours and cost (billing.serializers' money and hours), and the finance overview."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rest_framework import serializers

from billing import periods
from billing.serializers import HoursField, MoneyField
from billing.usage.overview import OVERVIEW_SORTS
from billing.usage.selectors import USAGE_GROUPS
from portal.errors import DomainError

MAX_DAYS = 366


class UsageQuerySerializer(serializers.Serializer):
    month = serializers.CharField(required=False, help_text="A local month, YYYY-MM; this month when no period is given.")
    start = serializers.DateField(required=False, help_text="The first local day (YYYY-MM-DD), with `end` instead of `month`.")
    end = serializers.DateField(required=False, help_text="The last local day included (YYYY-MM-DD).")
    team = serializers.CharField(required=False, help_text="A team's slug; a team you cannot see answers 404.")
    by = serializers.CharField(required=False, default="team,flavor",
                               help_text=f"Comma-separated groups among {', '.join(USAGE_GROUPS)}.")

    def validate_by(self, value: str) -> tuple[str, ...]:
        groups = tuple(part.strip() for part in value.split(",") if part.strip())
        unknown = [group for group in groups if group not in USAGE_GROUPS]
        if unknown or not groups or len(set(groups)) != len(groups):
            raise serializers.ValidationError(
                f"“{value}” is not a grouping; give distinct names among {', '.join(USAGE_GROUPS)}.")
        return groups

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start, end, month = attrs.get("start"), attrs.get("end"), attrs.get("month")
        if (start is None) != (end is None):
            raise serializers.ValidationError("Give both start and end, or a month.")
        if start is not None and month:
            raise serializers.ValidationError("Give a month or start and end, not both.")
        if start is None:
            try:
                first = periods.month_asked(month)
            except DomainError as error:
                raise serializers.ValidationError({"month": error.message}) from None
            start, end = first, periods.next_month(first) - dt.timedelta(days=1)
        assert start is not None and end is not None
        if end < start:
            raise serializers.ValidationError("The end is before the start.")
        if (end - start).days >= MAX_DAYS:
            raise serializers.ValidationError(f"A period is at most {MAX_DAYS} days; ask for it in parts.")
        attrs["start"], attrs["end"] = start, end
        return attrs


class UsageRowSerializer(serializers.Serializer):
    team = serializers.CharField(required=False, help_text="The account's slug (a deleted team keeps it).")
    team_name = serializers.CharField(required=False, help_text="The team's name (a deleted team keeps its last).")
    cost_center = serializers.CharField(required=False, allow_blank=True, help_text="The cost center the team is billed to.")
    flavor = serializers.CharField(required=False)
    person = serializers.CharField(required=False, help_text="Who launched the workloads: the username they had then.")
    person_id = serializers.IntegerField(
        required=False, help_text="Their user id (null for hours metered before ids were kept): usage is the person's, "
                                  "whatever they were named.")
    day = serializers.DateField(required=False, help_text="A local day of the billing time zone (see time_zone).")
    borrowed = serializers.BooleanField(required=False, help_text="Run on another team's idle quota.")
    gpu_hours = HoursField(help_text="Physical GPU-hours: the row's share of its statement lines' hours.")
    cost = MoneyField(help_text="The row's share of its statement lines' rounded amounts; rows add up to the total.")


class UsageTotalSerializer(serializers.Serializer):
    gpu_hours = HoursField()
    cost = MoneyField(help_text="The sum of the rows.")


class TeamEnergySerializer(serializers.Serializer):
    team = serializers.CharField(source="slug")
    kwh = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="kWh, rounded half-even to two places.")
    kg_co2e = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True,
                                       help_text="kg CO₂e at the site's emission factor; null without one.")


class EnergySerializer(serializers.Serializer):
    kwh = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="The sum of the teams' kWh.")
    kg_co2e = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True,
                                       help_text="The sum of the teams' kg CO₂e; null without an emission factor.")
    emission_factor_kg_per_kwh = serializers.DecimalField(max_digits=8, decimal_places=4, allow_null=True, source="factor")
    metered_through = serializers.DateTimeField(allow_null=True, source="through",
                                                help_text="Energy is metered up to here: each hour once it is over.")
    unavailable = serializers.CharField(allow_blank=True, help_text="Why there is no figure, in words.")
    teams = TeamEnergySerializer(many=True, help_text="The teams that drew any, by slug.")


class UsageReportSerializer(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField(help_text="The last local day included.")
    time_zone = serializers.CharField(help_text="The billing time zone: days and months are its local ones.")
    currency = serializers.CharField()
    by = serializers.ListField(child=serializers.CharField())
    rows = UsageRowSerializer(many=True)
    total = UsageTotalSerializer()
    energy = EnergySerializer(help_text="The GPUs' energy over the period per team (the GPUs' draw only: DCGM power, "
                                        "each pod's part of its card's, metered hourly).")


class OverviewQuerySerializer(serializers.Serializer):
    month = serializers.CharField(required=False, help_text="A local month, YYYY-MM; this month when left out.")
    sort = serializers.ChoiceField(choices=OVERVIEW_SORTS, required=False, default="cost")
    dir = serializers.ChoiceField(choices=("asc", "desc"), required=False, default="desc")


class OverviewRowSerializer(serializers.Serializer):
    team = serializers.CharField(source="team_slug", allow_null=True, help_text="Null once the team is deleted.")
    team_name = serializers.CharField(source="name")
    cost_center = serializers.CharField(allow_blank=True)
    gpu_hours = HoursField()
    cost = MoneyField(help_text="The sum of the team's statement lines so far, each rounded once.")
    previous_cost = MoneyField(help_text="Last month's, the same way.")
    change_percent = serializers.DecimalField(source="change", max_digits=12, decimal_places=1, allow_null=True,
                                              help_text="Against last month, to a tenth; null when last month cost nothing.")
    department = serializers.CharField(allow_null=True, help_text="Its team's department's slug; null for none.")


class OverviewDepartmentSerializer(serializers.Serializer):
    department = serializers.CharField(source="slug", allow_null=True,
                                       help_text="Null for the teams in no department (and deleted teams).")
    department_name = serializers.CharField(source="name")
    teams = serializers.IntegerField()
    gpu_hours = HoursField()
    cost = MoneyField(help_text="The sum of its teams' costs as the teams list shows them.")
    previous_cost = MoneyField()
    change_percent = serializers.DecimalField(source="change", max_digits=12, decimal_places=1, allow_null=True)


class OverviewFlavorSerializer(serializers.Serializer):
    flavor = serializers.CharField(source="key")
    flavor_name = serializers.CharField(source="label")
    gpu_hours = HoursField()
    cost = MoneyField()


class OverviewUnallocatedSerializer(serializers.Serializer):
    flavor = serializers.CharField(source="flavor.slug")
    gpu_hours = HoursField(help_text="Capacity nobody used.")
    shared_hours = HoursField(help_text="Of it, shared among teams by guarantee (the flavor's idle policy).")


class OverviewSerializer(serializers.Serializer):
    month = serializers.CharField()
    time_zone = serializers.CharField(help_text="The billing time zone the month is local to.")
    currency = serializers.CharField()
    teams = OverviewRowSerializer(many=True, source="rows")
    departments = OverviewDepartmentSerializer(many=True, help_text="Empty where no team is in a department.")
    flavors = OverviewFlavorSerializer(many=True, source="flavor_totals")
    unallocated = OverviewUnallocatedSerializer(many=True)
    total_gpu_hours = HoursField(source="total.gpu_hours")
    total_cost = MoneyField(source="total.cost", help_text="The sum of the teams' costs.")
    previous_total_cost = MoneyField(source="previous_total")
