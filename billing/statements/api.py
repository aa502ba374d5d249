"""API for monthly statements: the closed months a caller may see, closing one (finance and
platform admins), its lines and its adjustments (adding one: finance and platform admins).

Each endpoint parses, calls one service or selector and serializes. A statement the caller may not
see, or a team whose part they may not read, answers 404; a team lead reads their team's part only.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from billing import periods
from billing.models import Statement
from billing.statements import exports, selectors, services
from billing.statements.exports import download
from billing.statements.selectors import StatementPicture, department_totals
from billing.statements.serializers import (
    MONTH_PATTERN,
    AdjustmentCreateSerializer,
    AdjustmentSerializer,
    CloseSerializer,
    StatementDetailSerializer,
    StatementLineSerializer,
    StatementSerializer,
)
from portal.adapters import parse, require_perm, signed_in_user
from portal.errors import DomainError

FILE_ACTIONS = ("csv", "pdf")
TEAM_PARAMETER = OpenApiParameter("team", str, description="A team's slug: just that team's part (404 if not yours).")


def _money(picture: StatementPicture) -> dict[str, Any]:
    """The serializer context money needs: the statement's currency."""
    return {"currency": picture.statement.currency}


def _detail(picture: StatementPicture) -> dict[str, Any]:
    return {"statement": picture.statement, "teams": picture.teams, "departments": department_totals(picture),
            "charged": picture.charged,
            "adjusted": picture.adjusted, "total": picture.total,
            "unallocated_total": picture.unallocated_total if picture.whole else None,
            "kwh": picture.kwh, "kg_co2e": picture.kg_co2e}


@extend_schema_view(
    list=extend_schema(description="Closed months you may see: all for finance and platform admins, those that bill "
                                   "your team for a team lead."),
    retrieve=extend_schema(parameters=[TEAM_PARAMETER], responses={200: StatementDetailSerializer},
                           description="A closed month's totals per team you may read."),
    create=extend_schema(request=CloseSerializer, responses={201: StatementDetailSerializer},
                         description="Finance and platform admins: close a month that has ended, once."),
)
class StatementViewSet(viewsets.GenericViewSet):
    serializer_class = StatementSerializer
    queryset = Statement.objects.none()
    lookup_field = "month"
    lookup_value_regex = MONTH_PATTERN

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        """The files are answered as they are, whatever the caller accepts (Accept: text/csv
        included); a refusal on their way (404, 403) is the API's JSON, like every other."""
        if self.action in FILE_ACTIONS:
            return JSONRenderer(), JSONRenderer.media_type
        return super().perform_content_negotiation(request, force)

    def get_queryset(self) -> QuerySet[Statement]:
        return Statement.objects.for_user(self.request.user).filter(sealed=True).order_by("-month")

    def _picture(self, request: Request, month: str) -> StatementPicture:
        statement = selectors.statement_visible(user=request.user, month=month)
        return selectors.statement_picture(user=request.user, statement=statement,
                                                     team=request.query_params.get("team") or None)

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(StatementSerializer(page, many=True).data)

    def retrieve(self, request: Request, month: str) -> Response:
        picture = self._picture(request, month)
        return Response(StatementDetailSerializer(_detail(picture), context=_money(picture)).data)

    def create(self, request: Request) -> Response:
        text = parse(CloseSerializer, request)["month"]
        month = periods.month_parse(text)
        if month is None:
            raise DomainError(f"“{text}” is not a month; write it as YYYY-MM, for example 2026-10.", field="month")
        statement = services.statement_close(actor=signed_in_user(request), month=month)
        picture = selectors.statement_picture(user=request.user, statement=statement)
        return Response(StatementDetailSerializer(_detail(picture), context=_money(picture)).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[TEAM_PARAMETER], responses={200: StatementLineSerializer(many=True)},
                   description="The statement's lines you may read: per team × flavor × rate period, and (finance) "
                               "the unallocated capacity per flavor.")
    @action(detail=True, methods=["get"])
    def lines(self, request: Request, month: str) -> Response:
        picture = self._picture(request, month)
        rows = [line for team in picture.teams for line in team.lines] + picture.unallocated
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(StatementLineSerializer(page, many=True, context=_money(picture)).data)

    @extend_schema(parameters=[TEAM_PARAMETER], responses={(200, "text/csv"): OpenApiTypes.BINARY},
                   description="The statement (or your team's part) as CSV for accounting: the same bytes as the page's "
                               "download. An API token with read scope may fetch it.")
    @action(detail=True, methods=["get"], url_path="csv")
    def csv(self, request: Request, month: str) -> HttpResponse:
        team = request.query_params.get("team") or None
        picture = self._picture(request, month)
        return download(exports.statement_csv(picture), "text/csv; charset=utf-8", exports.filename(picture, "csv", team))

    @extend_schema(parameters=[TEAM_PARAMETER], responses={(200, "application/pdf"): OpenApiTypes.BINARY},
                   description="The statement (or your team's part) as PDF. An API token with read scope may fetch it.")
    @action(detail=True, methods=["get"], url_path="pdf")
    def pdf(self, request: Request, month: str) -> HttpResponse:
        team = request.query_params.get("team") or None
        picture = self._picture(request, month)
        if not picture.teams and not picture.whole:
            raise Http404
        return download(exports.statement_pdf(picture), "application/pdf", exports.filename(picture, "pdf", team))

    @extend_schema(methods=["get"], parameters=[TEAM_PARAMETER], responses={200: AdjustmentSerializer(many=True)},
                   description="Adjustments on the statement that you may read.")
    @extend_schema(methods=["post"], request=AdjustmentCreateSerializer, responses={201: AdjustmentSerializer},
                   description="Finance and platform admins: a charge, or a credit as a negative amount, with a reason.")
    @action(detail=True, methods=["get", "post"])
    def adjustments(self, request: Request, month: str) -> Response:
        picture = self._picture(request, month)
        if request.method == "GET":
            rows = [adjustment for team in picture.teams for adjustment in team.adjustments]
            page = self.paginate_queryset(rows)
            return self.get_paginated_response(AdjustmentSerializer(page, many=True, context=_money(picture)).data)
        actor = signed_in_user(request)
        require_perm(actor, "billing.close_statements")
        data = parse(AdjustmentCreateSerializer, request)
        statement = picture.statement
        account = selectors.statement_account(statement=statement, slug=data["team"])
        if account is None:
            raise DomainError(f"There is no team “{data['team']}”.", field="team")
        adjustment = services.adjustment_add(actor=actor, statement=statement, account=account, amount=data["amount"],
                                               reason=data["reason"])
        return Response(AdjustmentSerializer(adjustment, context=_money(picture)).data, status=status.HTTP_201_CREATED)


def register(router: BaseRouter) -> None:
    router.register("statements", StatementViewSet, basename="statement")
