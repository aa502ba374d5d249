"""API for budgets: the budgets a caller may see with where each stands this month, setting a
team's budget (finance and platform admins), and the alerts sent. Another team's is 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from billing.budgets import selectors, services
from billing.budgets.serializers import BudgetAlertSerializer, BudgetSerializer, BudgetWriteSerializer
from billing.models import Budget, BudgetAlert
from portal.adapters import parse, signed_in_user
from tenants.models import Team


@extend_schema_view(
    list=extend_schema(description="Budgets of the teams you may see, with this month's spending and forecast."),
    retrieve=extend_schema(description="A team's budget; 404 for a team you may not see or one without a budget."),
    update=extend_schema(request=BudgetWriteSerializer, responses={200: BudgetSerializer},
                         description="Finance and platform admins: set the team's monthly budget."),
)
class BudgetViewSet(viewsets.GenericViewSet):
    serializer_class = BudgetSerializer
    queryset = Budget.objects.none()
    lookup_field = "account__team__slug"
    lookup_url_kwarg = "team"
    http_method_names = ["get", "put", "head", "options"]

    def get_queryset(self) -> QuerySet[Budget]:
        return selectors.budgets_for_user(self.request.user).order_by("account__slug")

    def get_serializer_context(self) -> dict[str, Any]:
        # Each budget's status is read once per response, however many fields show it.
        return {**super().get_serializer_context(), "statuses": {}}

    def list(self, request: Request) -> Response:
        page = list(self.paginate_queryset(self.get_queryset()) or [])
        serializer = self.get_serializer(page, many=True)
        serializer.context["statuses"].update(selectors.budget_statuses(budgets=page))  # the page's, at once
        return self.get_paginated_response(serializer.data)

    def retrieve(self, request: Request, team: str) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    def update(self, request: Request, team: str) -> Response:
        visible = get_object_or_404(Team.objects.for_user(request.user), slug=team)
        budget = services.budget_set(actor=signed_in_user(request), team=visible, **parse(BudgetWriteSerializer, request))
        return Response(self.get_serializer(self.get_queryset().get(pk=budget.pk)).data)


@extend_schema_view(list=extend_schema(
    description="Budget alerts sent to the teams you may see, newest first.",
    parameters=[OpenApiParameter("team", str, description="A team's slug; a team you may not see gives an empty list.")]))
class BudgetAlertViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = BudgetAlertSerializer
    queryset = BudgetAlert.objects.none()
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[BudgetAlert]:
        alerts = selectors.alerts_for_user(self.request.user)
        team = self.request.query_params.get("team")
        return alerts.filter(account__team__slug=team) if team else alerts


def register(router: BaseRouter) -> None:
    router.register("budgets", BudgetViewSet, basename="budget")
    router.register("budget-alerts", BudgetAlertViewSet, basename="budget-alert")
