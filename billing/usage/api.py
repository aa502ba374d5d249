"""The usage API: `/api/billing/usage/` (any grouping over any local period) and
`/api/billing/overview/` (the finance overview as data).

Adapters over billing.usage's selectors. A caller reads the usage of the accounts it may see (its
own teams'; every one for finance and platform admins); naming a team it cannot see answers 404,
exactly like a team that does not exist. The overview is for those who read costs.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import energy, periods
from billing.rules import require_costs
from billing.usage import overview, selectors
from billing.usage.serializers import OverviewQuerySerializer, OverviewSerializer, UsageQuerySerializer, UsageReportSerializer
from portal.errors import DomainError


class UsageView(APIView):
    @extend_schema(parameters=[UsageQuerySerializer], responses={200: UsageReportSerializer},
                   description="GPU-hours and cost from the hourly rollups, grouped as asked, for a local month "
                               "or a run of local days, and the GPUs' energy per team. Members see their teams; "
                               "finance and platform admins all.")
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
        (begin, _), (_, finish) = periods.day_bounds(data["start"]), periods.day_bounds(data["end"])
        body = {"start": report.start, "end": report.end, "time_zone": report.time_zone, "currency": report.currency,
                "by": list(report.by), "rows": report.rows,
                "total": {"gpu_hours": report.total.gpu_hours, "cost": report.total.cost},
                "energy": energy.energy_report(accounts=list(accounts), start=begin, end=finish)}
        return Response(UsageReportSerializer(body, context={"currency": report.currency}).data)


class OverviewView(APIView):
    @extend_schema(parameters=[OverviewQuerySerializer], responses={200: OverviewSerializer},
                   description="The finance overview as data: every team's month so far (or a closed month) with its "
                               "cost center, GPU-hours, cost, last month's cost and the change; totals per flavor and "
                               "the unallocated capacity. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        require_costs(request.user)
        query = OverviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            month = periods.month_asked(query.validated_data.get("month"))
        except DomainError as error:
            raise serializers.ValidationError({"month": error.message}) from None
        found = overview.finance_overview(month=month, sort=query.validated_data["sort"],
                                          descending=query.validated_data["dir"] == "desc")
        body = {**found.__dict__, "month": f"{found.month:%Y-%m}", "time_zone": str(periods.billing_zone())}
        return Response(OverviewSerializer(body, context={"currency": found.currency}).data)
