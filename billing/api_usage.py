"""The usage and rate card API: `/api/billing/usage/`, `/api/billing/rates/` and `/api/billing/idle-policies/`.

Adapters over billing.selectors and billing.services. A caller reads the usage of the accounts
it may see (its own teams'; every one for finance and platform admins); naming a team it cannot
see answers 404, exactly like a team that does not exist. Rates are read by those who read costs
(`portal.read_costs`) and set through `billing.services.rate_set`, which decides who may; each
flavor's idle policy likewise through `billing.services.idle_policy_set`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import periods, selectors, services
from billing.models import IdlePolicy, Rate
from billing.serializers import HoursField, MoneyField
from billing.views import parse_month
from portal.adapters import StrictInputMixin, parse, signed_in_user
from portal.errors import DomainError
from portal.models import User
from tenants.models import Flavor

MAX_DAYS = 366


class UsageQuerySerializer(serializers.Serializer):
    month = serializers.CharField(required=False, help_text="A local month, YYYY-MM; this month when no period is given.")
    start = serializers.DateField(required=False, help_text="The first local day (YYYY-MM-DD), with `end` instead of `month`.")
    end = serializers.DateField(required=False, help_text="The last local day included (YYYY-MM-DD).")
    team = serializers.CharField(required=False, help_text="A team's slug; a team you cannot see answers 404.")
    by = serializers.CharField(required=False, default="team,flavor",
                               help_text=f"Comma-separated groups among {', '.join(selectors.USAGE_GROUPS)}.")

    def validate_by(self, value: str) -> tuple[str, ...]:
        groups = tuple(part.strip() for part in value.split(",") if part.strip())
        unknown = [group for group in groups if group not in selectors.USAGE_GROUPS]
        if unknown or not groups or len(set(groups)) != len(groups):
            raise serializers.ValidationError(
                f"“{value}” is not a grouping; give distinct names among {', '.join(selectors.USAGE_GROUPS)}.")
        return groups

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start, end, month = attrs.get("start"), attrs.get("end"), attrs.get("month")
        if (start is None) != (end is None):
            raise serializers.ValidationError("Give both start and end, or a month.")
        if start is not None and month:
            raise serializers.ValidationError("Give a month or start and end, not both.")
        if start is None:
            try:
                first = parse_month(month)
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


class UsageReportSerializer(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField(help_text="The last local day included.")
    time_zone = serializers.CharField(help_text="The billing time zone: days and months are its local ones.")
    currency = serializers.CharField()
    by = serializers.ListField(child=serializers.CharField())
    rows = UsageRowSerializer(many=True)
    total = UsageTotalSerializer()


class UsageView(APIView):
    @extend_schema(parameters=[UsageQuerySerializer], responses={200: UsageReportSerializer},
                   description="GPU-hours and cost from the hourly rollups, grouped as asked, for a local month "
                               "or a run of local days. Members see their teams; finance and platform admins all.")
    def get(self, request: Request) -> Response:
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        accounts = selectors.accounts_for_user(user=request.user)
        if data.get("team"):
            accounts = accounts.filter(slug=data["team"])
            if not accounts.exists():
                raise Http404
        report = selectors.usage_report(accounts=accounts, start=data["start"], end=data["end"], by=data["by"])
        body = {"start": report.start, "end": report.end, "time_zone": report.time_zone, "currency": report.currency,
                "by": list(report.by), "rows": report.rows,
                "total": {"gpu_hours": report.total.gpu_hours, "cost": report.total.cost}}
        return Response(UsageReportSerializer(body, context={"currency": report.currency}).data)


class OverviewQuerySerializer(serializers.Serializer):
    month = serializers.CharField(required=False, help_text="A local month, YYYY-MM; this month when left out.")
    sort = serializers.ChoiceField(choices=selectors.OVERVIEW_SORTS, required=False, default="cost")
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
    flavors = OverviewFlavorSerializer(many=True, source="flavor_totals")
    unallocated = OverviewUnallocatedSerializer(many=True)
    total_gpu_hours = HoursField(source="total.gpu_hours")
    total_cost = MoneyField(source="total.cost", help_text="The sum of the teams' costs.")
    previous_total_cost = MoneyField(source="previous_total")


class OverviewView(APIView):
    @extend_schema(parameters=[OverviewQuerySerializer], responses={200: OverviewSerializer},
                   description="The finance overview as data: every team's month so far (or a closed month) with its "
                               "cost center, GPU-hours, cost, last month's cost and the change; totals per flavor and "
                               "the unallocated capacity. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        if not request.user.has_perm("portal.read_costs"):
            raise PermissionDenied
        query = OverviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            month = parse_month(query.validated_data.get("month"))
        except DomainError as error:
            raise serializers.ValidationError({"month": error.message}) from None
        overview = selectors.finance_overview(month=month, sort=query.validated_data["sort"],
                                              descending=query.validated_data["dir"] == "desc")
        body = {**overview.__dict__, "month": f"{overview.month:%Y-%m}", "time_zone": str(periods.billing_zone())}
        return Response(OverviewSerializer(body, context={"currency": overview.currency}).data)


class RateSerializer(serializers.ModelSerializer):
    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="Who set it; null when the install's catalog or a since deleted account did.")

    class Meta:
        model = Rate
        fields = ["id", "flavor", "price_per_gpu_hour", "currency", "effective_from", "note", "created_by", "created_at"]
        read_only_fields = fields


class RateCreateSerializer(StrictInputMixin, serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all(), help_text="The flavor's slug.")
    price_per_gpu_hour = serializers.CharField(max_length=20, help_text="Per physical GPU-hour, e.g. \"2.75\".")
    currency = serializers.CharField(max_length=3, default="USD")
    effective_from = serializers.DateTimeField(required=False, allow_null=True, help_text="Now when left out.")
    note = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)


class RateListView(APIView):
    def _require_costs(self, request: Request) -> None:
        if not request.user.has_perm("portal.read_costs"):
            raise PermissionDenied

    @extend_schema(responses={200: RateSerializer(many=True)},
                   description="Every price, newest first per flavor. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        self._require_costs(request)
        rates = Rate.objects.select_related("flavor", "created_by").order_by("flavor__name", "-effective_from")
        return Response(RateSerializer(rates, many=True).data)

    @extend_schema(request=RateCreateSerializer, responses={201: RateSerializer},
                   description="A new price from now or a later moment; finance and platform admins.")
    def post(self, request: Request) -> Response:
        self._require_costs(request)
        rate = services.rate_set(actor=signed_in_user(request), **parse(RateCreateSerializer, request))
        return Response(RateSerializer(rate).data, status=status.HTTP_201_CREATED)


class IdlePolicySerializer(serializers.Serializer):
    flavor = serializers.CharField(help_text="The flavor's slug.")
    mode = serializers.ChoiceField(choices=IdlePolicy.Mode.choices, help_text="“apart” (the default) or “share”.")
    mode_label = serializers.CharField(help_text="The policy in words.")


class IdlePolicySetSerializer(StrictInputMixin, serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all(), help_text="The flavor's slug.")
    mode = serializers.CharField(max_length=16, help_text="“apart”: show unallocated capacity apart; “share”: share "
                                                          "it among teams by guaranteed quota.")


def _idle_policy_body(row: selectors.IdlePolicyRow) -> dict[str, str]:
    return {"flavor": row.flavor.slug, "mode": row.mode, "mode_label": row.label}


class IdlePolicyListView(APIView):
    def _require_costs(self, request: Request) -> None:
        if not request.user.has_perm("portal.read_costs"):
            raise PermissionDenied

    @extend_schema(responses={200: IdlePolicySerializer(many=True)},
                   description="What happens to each flavor's unallocated capacity. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        self._require_costs(request)
        return Response(IdlePolicySerializer([_idle_policy_body(row) for row in selectors.idle_policy_rows()],
                                             many=True).data)

    @extend_schema(request=IdlePolicySetSerializer, responses={200: IdlePolicySerializer},
                   description="Sets one flavor's idle policy (audited); finance and platform admins.")
    def post(self, request: Request) -> Response:
        self._require_costs(request)
        data = parse(IdlePolicySetSerializer, request)
        services.idle_policy_set(actor=signed_in_user(request), flavor=data["flavor"], mode=data["mode"])
        [row] = selectors.idle_policy_rows(flavors=Flavor.objects.filter(pk=data["flavor"].pk))
        return Response(IdlePolicySerializer(_idle_policy_body(row)).data)
