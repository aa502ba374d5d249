"""API endpoints for teams, memberships, flavors, quota requests, grants and the audit trail.

Each endpoint parses, calls one service or selector and serializes. Who may do what is decided
by the services; what a caller may see is decided once, by the scoped querysets, so another
team's object answers 404.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.db.models import Prefetch, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal.models import AuditEvent, User
from tenants import reconcile, selectors, services
from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, Team

TRUE_VALUES = {"1", "true", "yes"}
FALSE_VALUES = {"0", "false", "no"}

TEAM_FILTER = OpenApiParameter("team", str, description="Only rows of the team with this slug.")


# --- Shared parsing ------------------------------------------------------------------------


class StrictInputMixin:
    """Refuses fields the endpoint does not accept: a client that sends `status` or `slug`
    learns it cannot change them instead of believing it did."""

    refusals: ClassVar[dict[str, str]] = {}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            writable = [name for name, field in fields.items() if not field.read_only]
            refused = [key for key in data if key not in writable]
            if refused:
                accepted = ", ".join(writable)
                raise serializers.ValidationError(
                    {key: [self.refusals.get(key, f"{key} cannot be set here; this endpoint accepts {accepted}.")]
                     for key in refused}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


def _sentences(detail: Any) -> list[str]:
    if isinstance(detail, Mapping):
        return [sentence for value in detail.values() for sentence in _sentences(value)]
    if isinstance(detail, list):
        return [sentence for item in detail for sentence in _sentences(item)]
    return [str(detail)]


def _parse(serializer_class: type[serializers.Serializer], request: Request, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=request.data, context={"request": request}, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _flag(request: Request, name: str) -> bool | None:
    value = request.query_params.get(name, "").lower()
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    if value:
        raise serializers.ValidationError({name: [f"{name} is 1 or 0, not “{value}”."]})
    return None


def _visible_team(request: Request, slug: str) -> Team:
    team = Team.objects.for_user(request.user).filter(slug=slug).first()
    if team is None:
        raise serializers.ValidationError({"team": [f"There is no team “{slug}” that you can see."]})
    return team


@extend_schema_field(OpenApiTypes.STR)
class VisibleTeamField(serializers.SlugRelatedField):
    """A team named by its slug, among the teams the caller can see."""

    default_error_messages = {
        "does_not_exist": "There is no team “{value}” that you can see.",
        "invalid": "A team is named by its slug, e.g. “vision”.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", help_text="The team's slug.", **kwargs)

    def get_queryset(self) -> QuerySet[Team]:
        request = self.context.get("request")
        return Team.objects.for_user(request.user if request else None)


# --- Teams ---------------------------------------------------------------------------------


class TeamMemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]
        read_only_fields = fields


class GuaranteeSerializer(serializers.Serializer):
    flavor = serializers.IntegerField(help_text="Flavor id.")
    flavor_slug = serializers.CharField()
    flavor_name = serializers.CharField()
    units = serializers.IntegerField(help_text="Guaranteed units of this flavor, from active grants.")


class TeamListSerializer(serializers.ListSerializer):
    def to_representation(self, data: Any) -> list[Any]:
        teams = list(data.all() if isinstance(data, QuerySet) else data)
        self.child.context["guarantees"] = selectors.guarantee_rows_by_team(team_ids=[team.pk for team in teams])
        return super().to_representation(teams)


class TeamSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True)
    pending_requests = serializers.IntegerField(source="pending_count", read_only=True)
    sync_state = serializers.ChoiceField(choices=Team.SyncState.choices, read_only=True)
    members = TeamMemberSerializer(source="memberships", many=True, read_only=True)
    guarantees = serializers.SerializerMethodField()
    uid = serializers.UUIDField(read_only=True, help_text="Written on each of the team's cluster objects (annotation "
                                "gpu-portal.io/team-uid): the proof that the portal created them for this team.")

    class Meta:
        model = Team
        fields = ["id", "uid", "slug", "name", "cost_center", "description", "created_at", "member_count",
                  "pending_requests", "may_borrow", "lends_idle", "cpu_limit_cores", "memory_limit_gib", "pod_limit",
                  "sync_state", "synced_at", "sync_error", "members", "guarantees"]
        read_only_fields = fields
        list_serializer_class = TeamListSerializer

    @extend_schema_field(GuaranteeSerializer(many=True))
    def get_guarantees(self, team: Team) -> list[dict[str, Any]]:
        by_team = self.context.get("guarantees")
        if by_team is None:
            by_team = selectors.guarantee_rows_by_team(team_ids=[team.pk])
        return [
            {"flavor": flavor.pk, "flavor_slug": flavor.slug, "flavor_name": flavor.name, "units": units}
            for flavor, units in by_team.get(team.pk, [])
        ]


class QueueUsageSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed = serializers.IntegerField()
    in_use = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Units running on other teams' idle quota (preemptible).")
    lent = serializers.IntegerField(help_text="This team's idle units in use by other teams.")


class ClusterPictureSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=Team.SyncState.choices)
    error = serializers.CharField(help_text="Why the last apply failed, or why the team cannot be provisioned (its namespace "
                                  "or ClusterQueue exists and was not created by the portal for it); empty when neither.")
    synced_at = serializers.DateTimeField(allow_null=True, help_text="The last successful apply.")
    unreachable = serializers.CharField(help_text="Set when the cluster did not answer for the live usage.")
    usage = QueueUsageSerializer(many=True)


class TeamCreateSerializer(StrictInputMixin, serializers.Serializer):
    slug = serializers.CharField(help_text="Becomes the namespace; cannot change later.")
    name = serializers.CharField()
    cost_center = serializers.CharField(allow_blank=True, default="")
    description = serializers.CharField(allow_blank=True, default="")


class TeamUpdateSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        "slug": "A team's slug is its Kubernetes namespace and cannot change after the team is created.",
    }

    name = serializers.CharField(required=False)
    cost_center = serializers.CharField(allow_blank=True, required=False)
    description = serializers.CharField(allow_blank=True, required=False)
    may_borrow = serializers.BooleanField(required=False, help_text="Platform admins only.")
    lends_idle = serializers.BooleanField(required=False, help_text="Platform admins only.")
    cpu_limit_cores = serializers.IntegerField(required=False, min_value=1, help_text="Platform admins only.")
    memory_limit_gib = serializers.IntegerField(required=False, min_value=1, help_text="Platform admins only.")
    pod_limit = serializers.IntegerField(required=False, min_value=1, help_text="Platform admins only.")


@extend_schema_view(
    create=extend_schema(request=TeamCreateSerializer, responses={201: TeamSerializer},
                         description="Platform admins only."),
    partial_update=extend_schema(request=TeamUpdateSerializer, responses={200: TeamSerializer},
                                 description="Team leads and platform admins; the slug cannot change."),
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
        team = services.team_create(actor=request.user, **_parse(TeamCreateSerializer, request))
        return Response(self.get_serializer(self.get_queryset().get(pk=team.pk)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        team = self.get_object()
        services.team_update(actor=request.user, team=team, **_parse(TeamUpdateSerializer, request))
        return Response(self.get_serializer(team).data)

    @extend_schema(description="Platform admins only. The team's namespace and queue, and the workloads in them, go with it.")
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.team_delete(actor=request.user, team=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: ClusterPictureSerializer},
                   description="The team in the cluster: in sync, applying or the error, and the live quota of its queue.")
    @action(detail=True, methods=["get"])
    def cluster(self, request: Request, slug: str | None = None) -> Response:
        picture = reconcile.team_cluster_picture(team=self.get_object())
        return Response(ClusterPictureSerializer(picture).data)


# --- Memberships ---------------------------------------------------------------------------


class MembershipSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "team", "username", "role", "created_at"]
        read_only_fields = fields


ROLE_ERRORS = {"invalid_choice": "“{input}” is not a role; choose member or lead."}


class MembershipCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    username = serializers.CharField(help_text="The person to add.")
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER,
                                   error_messages=ROLE_ERRORS)

    def validate_username(self, value: str) -> User:
        user = User.objects.filter(username=value).first()
        if user is None:
            raise serializers.ValidationError(f"There is no user “{value}”; they appear after their first login.")
        return user


class MembershipUpdateSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        "team": "A membership cannot move to another team; add the person to that team instead.",
        "user": "A membership cannot change its person; remove it and add the other person.",
        "username": "A membership cannot change its person; remove it and add the other person.",
    }

    role = serializers.ChoiceField(choices=Membership.Role.choices, error_messages=ROLE_ERRORS)


@extend_schema_view(
    list=extend_schema(parameters=[TEAM_FILTER]),
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
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Membership]:
        memberships = selectors.memberships_for_user(user=self.request.user)
        if slug := self.request.query_params.get("team"):
            memberships = memberships.filter(team__slug=slug)
        return memberships

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = _parse(MembershipCreateSerializer, request)
        membership = services.membership_add(actor=request.user, team=data["team"], user=data["username"], role=data["role"])
        return Response(self.get_serializer(membership).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        role = _parse(MembershipUpdateSerializer, request)["role"]
        return Response(self.get_serializer(services.membership_set_role(actor=request.user, membership=membership, role=role)).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.membership_remove(actor=request.user, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Flavors -------------------------------------------------------------------------------


class FlavorSerializer(serializers.Serializer):
    """A flavor and where its capacity stands."""

    id = serializers.IntegerField(source="flavor.pk")
    name = serializers.CharField(source="flavor.name")
    slug = serializers.CharField(source="flavor.slug")
    resource_name = serializers.CharField(source="flavor.resource_name")
    sharing_mode = serializers.ChoiceField(source="flavor.sharing_mode", choices=Flavor.SharingMode.choices)
    gpu_model = serializers.CharField(source="flavor.gpu_model")
    fraction_numerator = serializers.IntegerField(source="flavor.fraction_numerator")
    fraction_denominator = serializers.IntegerField(source="flavor.fraction_denominator")
    node_labels = serializers.DictField(source="flavor.node_labels", child=serializers.CharField())
    tolerations = serializers.ListField(source="flavor.tolerations", child=serializers.DictField())
    is_active = serializers.BooleanField(source="flavor.is_active")
    created_at = serializers.DateTimeField(source="flavor.created_at")
    capacity_units = serializers.IntegerField(source="capacity", help_text="Units the cluster has.")
    guaranteed_units = serializers.IntegerField(source="guaranteed", help_text="Units all teams are guaranteed.")
    free_units = serializers.IntegerField(source="free", help_text="Units no team is guaranteed yet.")
    team_guaranteed_units = serializers.IntegerField(
        source="team_guaranteed", allow_null=True, help_text="With ?team=, the units that team is guaranteed."
    )


class FlavorWriteSerializer(StrictInputMixin, serializers.ModelSerializer):
    class Meta:
        model = Flavor
        fields = ["name", "slug", "resource_name", "sharing_mode", "gpu_model", "fraction_numerator",
                  "fraction_denominator", "capacity_units", "node_labels", "tolerations", "is_active"]


@extend_schema_view(
    list=extend_schema(
        parameters=[OpenApiParameter("team", str, description="Also show what the team with this slug holds.")],
        description="Active flavors.",
    ),
    create=extend_schema(request=FlavorWriteSerializer, responses={201: FlavorSerializer},
                         description="Platform admins only."),
    partial_update=extend_schema(request=FlavorWriteSerializer, responses={200: FlavorSerializer},
                                 description="Platform admins only. Capacity cannot drop below what teams hold."),
)
class FlavorViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = FlavorSerializer
    queryset = Flavor.objects.all()
    http_method_names = ["get", "post", "patch", "head", "options"]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        slug = request.query_params.get("team")
        capacities = selectors.flavor_capacities(team=_visible_team(request, slug) if slug else None)
        page = self.paginate_queryset(capacities)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=self.get_object())).data)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        flavor = Flavor(**_parse(FlavorWriteSerializer, request))
        flavor = services.flavor_save(actor=request.user, flavor=flavor)
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=flavor)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        flavor = self.get_object()
        for field, value in _parse(FlavorWriteSerializer, request, instance=flavor, partial=True).items():
            setattr(flavor, field, value)
        flavor = services.flavor_save(actor=request.user, flavor=flavor)
        return Response(self.get_serializer(selectors.flavor_capacity(flavor=flavor)).data)


# --- Quota requests ------------------------------------------------------------------------


class QuotaLineSerializer(serializers.Serializer):
    flavor = serializers.IntegerField(source="flavor.pk", help_text="Flavor id.")
    flavor_slug = serializers.CharField(source="flavor.slug")
    flavor_name = serializers.CharField(source="flavor.name")
    units = serializers.IntegerField()


class UnitsField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError:
            raise serializers.ValidationError(f"units “{data}” is not a whole number, e.g. 4") from None


class QuotaLinesSerializer(serializers.ListSerializer):
    """Errors as plain sentences, so the message reads "lines: flavor 999 does not exist"."""

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(_sentences(exc.detail)) from None


class QuotaLineInputSerializer(serializers.Serializer):
    flavor = serializers.PrimaryKeyRelatedField(
        queryset=Flavor.objects.all(),
        help_text="Flavor id, from /api/flavors/.",
        error_messages={
            "required": "every line needs a flavor id",
            "null": "every line needs a flavor id",
            "does_not_exist": "flavor {pk_value} does not exist",
            "incorrect_type": "flavor is a flavor id (a number), not {data_type}",
        },
    )
    units = UnitsField(
        help_text="GPUs (or slices) to add; negative to give permanent units back.",
        error_messages={
            "required": "every line needs a number of units",
            "null": "every line needs a number of units",
        },
    )

    class Meta:
        list_serializer_class = QuotaLinesSerializer


class QuotaRequestSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requester = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    lines = QuotaLineSerializer(many=True, read_only=True)

    class Meta:
        model = QuotaRequest
        fields = ["id", "team", "requester", "status", "justification", "ends_on", "created_at",
                  "decided_by", "decided_at", "decision_note", "lines"]
        read_only_fields = fields


class QuotaRequestCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    lines = QuotaLineInputSerializer(many=True, required=False)
    justification = serializers.CharField(allow_blank=True, default="", help_text="Why the team needs it.")
    ends_on = serializers.DateField(allow_null=True, default=None,
                                    help_text="Last day of temporary quota; leave out for permanent.")


class QuotaDecisionSerializer(StrictInputMixin, serializers.Serializer):
    note = serializers.CharField(allow_blank=True, default="", help_text="Shown to the requester.")


@extend_schema_view(
    list=extend_schema(parameters=[
        TEAM_FILTER,
        OpenApiParameter("status", str, enum=QuotaRequest.Status.values),
        OpenApiParameter("mine", OpenApiTypes.BOOL, description="Only requests the caller filed."),
    ]),
    create=extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer},
                         description="Members of the team (and platform admins) file requests."),
)
class QuotaRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Requests change status only through approve, reject and cancel."""

    serializer_class = QuotaRequestSerializer
    queryset = QuotaRequest.objects.none()

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        params = self.request.query_params
        wanted = params.get("status") or None
        if wanted and wanted not in QuotaRequest.Status.values:
            choices = ", ".join(QuotaRequest.Status.values)
            raise serializers.ValidationError({"status": [f"“{wanted}” is not a status; choose one of {choices}."]})
        requests = selectors.quota_requests_for_user(user=self.request.user, status=wanted)
        if slug := params.get("team"):
            requests = requests.filter(team__slug=slug)
        if _flag(self.request, "mine"):
            requests = requests.filter(requester=self.request.user)
        return requests

    def _answer(self, quota_request: QuotaRequest, code: int = status.HTTP_200_OK) -> Response:
        fresh = selectors.quota_requests_with_lines(QuotaRequest.objects.filter(pk=quota_request.pk)).get()
        return Response(self.get_serializer(fresh).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = _parse(QuotaRequestCreateSerializer, request)
        quota_request = services.quota_request_create(
            requester=request.user,
            team=data["team"],
            lines=[services.LineInput(flavor=line["flavor"], units=line["units"]) for line in data.get("lines", [])],
            justification=data["justification"],
            ends_on=data["ends_on"],
        )
        return self._answer(quota_request, status.HTTP_201_CREATED)

    @extend_schema(request=QuotaDecisionSerializer, responses={200: QuotaRequestSerializer},
                   description="Team leads within capacity; platform admins.")
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        quota_request = self.get_object()
        note = _parse(QuotaDecisionSerializer, request)["note"]
        return self._answer(services.quota_request_approve(quota_request=quota_request, approver=request.user, note=note))

    @extend_schema(request=QuotaDecisionSerializer, responses={200: QuotaRequestSerializer},
                   description="Team leads and platform admins.")
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        quota_request = self.get_object()
        note = _parse(QuotaDecisionSerializer, request)["note"]
        return self._answer(services.quota_request_reject(quota_request=quota_request, approver=request.user, note=note))

    @extend_schema(request=None, responses={200: QuotaRequestSerializer},
                   description="The requester (or a platform admin) withdraws a pending request.")
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._answer(services.quota_request_cancel(quota_request=self.get_object(), actor=request.user))


# --- Grants and the audit trail ------------------------------------------------------------


class QuotaGrantSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor_slug = serializers.CharField(source="flavor.slug", read_only=True)
    flavor_name = serializers.CharField(source="flavor.name", read_only=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = QuotaGrant
        fields = ["id", "team", "flavor", "flavor_slug", "flavor_name", "units", "request", "valid_from",
                  "valid_until", "ended_at", "is_active"]
        read_only_fields = fields


@extend_schema_view(list=extend_schema(parameters=[
    TEAM_FILTER,
    OpenApiParameter("active", OpenApiTypes.BOOL, description="1: grants in force now; 0: ended or not yet valid."),
]))
class QuotaGrantViewSet(viewsets.ReadOnlyModelViewSet):
    """Grants come only from approved requests; nobody writes them here."""

    serializer_class = QuotaGrantSerializer
    queryset = QuotaGrant.objects.none()

    def get_queryset(self) -> QuerySet[QuotaGrant]:
        grants = QuotaGrant.objects.for_user(self.request.user).select_related("team", "flavor")
        if slug := self.request.query_params.get("team"):
            grants = grants.filter(team__slug=slug)
        active = _flag(self.request, "active")
        if active is not None:
            in_force = QuotaGrant.objects.active().values("pk")
            grants = grants.filter(pk__in=in_force) if active else grants.exclude(pk__in=in_force)
        return grants


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    data = serializers.DictField(read_only=True)

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "actor", "action", "object_type", "object_id", "team_id", "message", "data"]
        read_only_fields = fields


@extend_schema_view(list=extend_schema(parameters=[TEAM_FILTER]))
class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AuditEventSerializer
    queryset = AuditEvent.objects.none()

    def get_queryset(self) -> QuerySet[AuditEvent]:
        slug = self.request.query_params.get("team")
        if not slug:
            return selectors.audit_events_for_user(user=self.request.user)
        # The selector trusts the team it is given, so only a team the caller can see reaches it.
        team = Team.objects.for_user(self.request.user).filter(slug=slug).first()
        if team is None:
            return AuditEvent.objects.none()
        return selectors.audit_events_for_user(user=self.request.user, team=team)


def register(router: BaseRouter) -> None:
    router.register("teams", TeamViewSet, basename="team")
    router.register("memberships", MembershipViewSet, basename="membership")
    router.register("flavors", FlavorViewSet, basename="flavor")
    router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
    router.register("grants", QuotaGrantViewSet, basename="grant")
    router.register("audit-events", AuditEventViewSet, basename="audit-event")
