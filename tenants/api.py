"""API endpoints for teams, memberships, flavors, quota requests, grants and the audit trail.

Each endpoint parses, calls one service or selector and serializes. Who may do what is decided
by the services; what a caller may see is decided once, by the scoped querysets, so another
team's object answers 404. Lists are filtered by the FilterSets in tenants/filters.py, the same
ones the pages use.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal.adapters import parse, signed_in_user
from portal.models import AuditEvent, User
from portal.roles import sees_all_teams
from tenants import cluster_selectors, selectors, services
from tenants.filters import AuditEventFilter, FlavorFilter, MembershipFilter, QuotaGrantFilter, QuotaRequestFilter
from tenants.models import Department, Flavor, Membership, QuotaGrant, QuotaRequest, Team, current_pool_prefetch
from tenants.serializers import (
    AuditEventSerializer,
    ClusterPictureSerializer,
    DepartmentSerializer,
    DepartmentWriteSerializer,
    FlavorSerializer,
    FlavorWriteSerializer,
    MembershipCreateSerializer,
    MembershipSerializer,
    MembershipUpdateSerializer,
    QuotaApprovalSerializer,
    QuotaDecisionSerializer,
    QuotaGrantSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestSerializer,
    TeamCreateSerializer,
    TeamSerializer,
    TeamUpdateSerializer,
)

# --- Teams -------------------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=TeamCreateSerializer, responses={201: TeamSerializer},
                         description="Platform admins only."),
    partial_update=extend_schema(request=TeamUpdateSerializer, responses={200: TeamSerializer},
                                 description="Team leads change the name and description; finance and platform admins the "
                                             "cost center, which statements bill; platform admins the sharing policy. "
                                             "The slug cannot change."),
)
class TeamViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamSerializer
    queryset = Team.objects.none()
    lookup_field = "slug"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Team]:
        # The selector's counts group the rows, and grouped queries ignore Meta.ordering.
        return selectors.teams_for_user(user=self.request.user).order_by("name", "pk").prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
        )

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        team = services.team_create(actor=signed_in_user(request), **parse(TeamCreateSerializer, request))
        return Response(self.get_serializer(self.get_queryset().get(pk=team.pk)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        team = self.get_object()
        services.team_update(actor=signed_in_user(request), team=team, **parse(TeamUpdateSerializer, request))
        return Response(self.get_serializer(team).data)

    @extend_schema(description="Platform admins only. The team's namespace and queue, and the workloads in them, go with it.")
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.team_delete(actor=signed_in_user(request), team=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: ClusterPictureSerializer},
                   description="The team in the cluster: in sync, applying or the error, and the live quota of its queue.")
    @action(detail=True, methods=["get"])
    def cluster(self, request: Request, slug: str | None = None) -> Response:
        picture = cluster_selectors.team_cluster_picture(team=self.get_object())
        return Response(ClusterPictureSerializer(picture).data)


# --- Memberships -------------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=MembershipCreateSerializer, responses={201: MembershipSerializer},
                         description="Team leads and platform admins."),
    partial_update=extend_schema(request=MembershipUpdateSerializer, responses={200: MembershipSerializer},
                                 description="Only the role can change."),
)
class MembershipViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet
):
    serializer_class = MembershipSerializer
    queryset = Membership.objects.none()
    filterset_class = MembershipFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Membership]:
        return selectors.memberships_for_user(user=self.request.user)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse(MembershipCreateSerializer, request)
        membership = services.membership_add_by_username(
            actor=signed_in_user(request), team=data["team"], username=data["username"], role=data["role"],
        )
        return Response(self.get_serializer(membership).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        role = parse(MembershipUpdateSerializer, request)["role"]
        membership = services.membership_set_role(actor=signed_in_user(request), membership=membership, role=role)
        return Response(self.get_serializer(membership).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.membership_remove(actor=signed_in_user(request), membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Flavors -----------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(description="Active flavors."),
    create=extend_schema(request=FlavorWriteSerializer, responses={201: FlavorSerializer},
                         description="Platform admins only."),
    partial_update=extend_schema(request=FlavorWriteSerializer, responses={200: FlavorSerializer},
                                 description="Platform admins only. Capacity cannot drop below what teams hold."),
)
class FlavorViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = FlavorSerializer
    queryset = Flavor.objects.all()
    filterset_class = FlavorFilter
    http_method_names = ["get", "post", "patch", "head", "options"]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The filter empties the list for a team the caller cannot see; a visible one adds its column.
        if self.filter_queryset(self.get_queryset()).exists():
            slug = request.query_params.get("team")
            team = Team.objects.for_user(request.user).filter(slug=slug).first() if slug else None
            capacities = selectors.flavor_capacities(team=team)
        else:
            capacities = []
        page = self.paginate_queryset(capacities)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=self.get_object())).data)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        flavor = Flavor(**parse(FlavorWriteSerializer, request))
        flavor = services.flavor_save(actor=signed_in_user(request), flavor=flavor)
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=flavor)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        flavor = self.get_object()
        for field, value in parse(FlavorWriteSerializer, request, instance=flavor, partial=True).items():
            setattr(flavor, field, value)
        flavor = services.flavor_save(actor=signed_in_user(request), flavor=flavor)
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=flavor)).data)


# --- Departments ---------------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=DepartmentWriteSerializer, responses={201: DepartmentSerializer},
                         description="Platform admins only; refused on a queue backend without departments."),
    partial_update=extend_schema(request=DepartmentWriteSerializer, responses={200: DepartmentSerializer},
                                 description="Platform admins only. The slug names the department's cohort and cannot "
                                             "change."),
    destroy=extend_schema(description="Platform admins only; refused while the department holds teams."),
)
class DepartmentViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin,
                        viewsets.ReadOnlyModelViewSet):
    """Departments list their teams, so only those who see every team (finance, platform admins) see them."""

    serializer_class = DepartmentSerializer
    queryset = Department.objects.none()
    lookup_field = "slug"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Department]:
        if not sees_all_teams(self.request.user):
            return Department.objects.none()
        return Department.objects.order_by("name").prefetch_related(
            Prefetch("teams", queryset=Team.objects.order_by("slug")),
            Prefetch("heads", queryset=User.objects.order_by("username")),
            current_pool_prefetch())

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse(DepartmentWriteSerializer, request)
        heads, pool = data.pop("heads", []), data.pop("pool", {})
        department = services.department_save(actor=signed_in_user(request), department=Department(**data), heads=heads,
                                              pool=pool)
        return Response(self.get_serializer(self.get_queryset().get(pk=department.pk)).data,
                        status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        department = self.get_object()
        data = parse(DepartmentWriteSerializer, request, instance=department, partial=True)
        heads, pool = data.pop("heads", None), data.pop("pool", None)
        for field, value in data.items():
            setattr(department, field, value)
        services.department_save(actor=signed_in_user(request), department=department, heads=heads, pool=pool)
        return Response(self.get_serializer(self.get_queryset().get(pk=department.pk)).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.department_delete(actor=signed_in_user(request), department=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Quota requests ----------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer},
                         description="Members of the team (and platform admins) file requests."),
)
class QuotaRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Requests change status only through approve, reject and cancel."""

    serializer_class = QuotaRequestSerializer
    queryset = QuotaRequest.objects.none()
    filterset_class = QuotaRequestFilter

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        return selectors.quota_requests_for_user(user=self.request.user)

    def _answer(self, quota_request: QuotaRequest, code: int = status.HTTP_200_OK) -> Response:
        fresh = selectors.quota_requests_with_lines(QuotaRequest.objects.filter(pk=quota_request.pk)).get()
        return Response(self.get_serializer(fresh).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse(QuotaRequestCreateSerializer, request)
        quota_request = services.quota_request_create(
            requester=signed_in_user(request),
            team=data["team"],
            lines=[services.LineInput(flavor=line["flavor"], units=line["units"]) for line in data.get("lines", [])],
            justification=data["justification"],
            ends_on=data["ends_on"],
            starts_on=data["starts_on"],
            renews=(get_object_or_404(self.get_queryset(), pk=data["renews"]) if data["renews"] is not None else None),
        )
        return self._answer(quota_request, status.HTTP_201_CREATED)

    @extend_schema(request=QuotaApprovalSerializer, responses={200: QuotaRequestSerializer},
                   description="Team leads within capacity; heads of the team's department; platform admins. `lines` may "
                               "grant fewer units than asked. Where the department has two approval levels a lead's "
                               "approval passes the request to its heads: it stays pending, `waits_for` “department "
                               "head”, and a head may grant at most what the lead did.")
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        quota_request = self.get_object()
        data = parse(QuotaApprovalSerializer, request)
        approver = signed_in_user(request)
        units = {line["flavor"]: line["units"] for line in data["lines"]}
        return self._answer(services.quota_request_approve(quota_request=quota_request, approver=approver,
                                                           note=data["note"], units=units or None))

    @extend_schema(request=QuotaDecisionSerializer, responses={200: QuotaRequestSerializer},
                   description="Team leads (until a lead has passed it to the department's heads), those heads and "
                               "platform admins.")
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        quota_request = self.get_object()
        note = parse(QuotaDecisionSerializer, request)["note"]
        approver = signed_in_user(request)
        return self._answer(services.quota_request_reject(quota_request=quota_request, approver=approver, note=note))

    @extend_schema(request=None, responses={200: QuotaRequestSerializer},
                   description="The requester (or a platform admin) withdraws a pending request.")
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._answer(services.quota_request_cancel(quota_request=self.get_object(), actor=signed_in_user(request)))


# --- Grants and the audit trail ----------------------------------------------------------------


class QuotaGrantViewSet(viewsets.ReadOnlyModelViewSet):
    """Grants come only from approved requests; nobody writes them here."""

    serializer_class = QuotaGrantSerializer
    queryset = QuotaGrant.objects.none()
    filterset_class = QuotaGrantFilter

    def get_queryset(self) -> QuerySet[QuotaGrant]:
        return QuotaGrant.objects.for_user(self.request.user).select_related("team", "flavor")


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AuditEventSerializer
    queryset = AuditEvent.objects.none()
    filterset_class = AuditEventFilter

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return selectors.audit_events_for_user(user=self.request.user)


def register(router: BaseRouter) -> None:
    router.register("teams", TeamViewSet, basename="team")
    router.register("memberships", MembershipViewSet, basename="membership")
    router.register("flavors", FlavorViewSet, basename="flavor")
    router.register("departments", DepartmentViewSet, basename="department")
    router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
    router.register("grants", QuotaGrantViewSet, basename="grant")
    router.register("audit-events", AuditEventViewSet, basename="audit-event")
