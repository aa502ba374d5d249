"""What the team and quota API endpoints read and write, and how their input is refused.

`VisibleTeamField` is public: every app's serializers name a team the same way.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from django.db import models
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.adapters import StrictInputMixin, VisibleSlugField, WholeNumberSerializerField, error_sentences
from portal.errors import DomainError
from portal.models import AuditEvent, User
from tenants import selectors, services
from tenants.models import Department, Flavor, Membership, QuotaGrant, QuotaRequest, Team

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise


class VisibleTeamField(VisibleSlugField):
    """A team named by its slug, among the teams the caller can see."""

    default_error_messages = {
        "does_not_exist": "There is no team “{value}” that you can see.",
        "invalid": "A team is named by its slug, e.g. “vision”.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(help_text="The team's slug.", **kwargs)

    def visible(self, user: Any) -> QuerySet[Team]:
        return Team.objects.for_user(user)


# --- Teams -------------------------------------------------------------------------------------


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
        # Every serializer in the tree reads the root's context dict (the stubs call it a Mapping), so
        # each TeamSerializer below finds the guarantees of the whole page there.
        context = cast("dict[str, Any]", self.context)
        context["guarantees"] = selectors.guarantee_rows_by_team(team_ids=[team.pk for team in teams])
        return super().to_representation(teams)


class TeamSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True)
    pending_requests = serializers.IntegerField(source="pending_count", read_only=True)
    sync_state = serializers.ChoiceField(choices=Team.SyncState.choices, read_only=True)
    members = TeamMemberSerializer(source="memberships", many=True, read_only=True)
    guarantees = serializers.SerializerMethodField()
    uid = serializers.UUIDField(read_only=True, help_text="Written on each of the team's cluster objects (annotation "
                                "gpu-portal.io/team-uid): the proof that the portal created them for this team.")
    department: serializers.SlugRelatedField[Department] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="The department's slug, or null for a team in none.")

    class Meta:
        model = Team
        fields = ["id", "uid", "slug", "name", "cost_center", "description", "created_at", "member_count",
                  "pending_requests", "department", "may_borrow", "lends_idle", "fair_share_weight", "cpu_limit_cores",
                  "memory_limit_gib", "pod_limit", "storage_quota", "requires_second_approver", "person_gpu_limit",
                  "person_share_percent", "sync_state", "synced_at", "sync_error", "members", "guarantees"]
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
    counted_by_portal = serializers.BooleanField(
        help_text="A CPU-only flavor, in no queue: in_use is the portal's count of the team's active workloads on it.")


class BorrowerSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="The team's name.")
    borrowed = serializers.IntegerField()
    weight = serializers.DecimalField(max_digits=5, decimal_places=2)


class FairShareSerializer(serializers.Serializer):
    flavor = serializers.CharField(help_text="The flavor's name.")
    weight = serializers.DecimalField(max_digits=5, decimal_places=2, help_text="The team's fair-share weight.")
    borrowed = serializers.IntegerField(help_text="Units the team borrows of it now.")
    pool = serializers.IntegerField(help_text="Units the teams of its cohort (its department's, or those in none) "
                                              "borrow of it now.")
    weights = serializers.DecimalField(max_digits=8, decimal_places=2,
                                       help_text="The borrowing teams' weights summed, the team's own included.")
    fair = serializers.DecimalField(max_digits=8, decimal_places=1,
                                    help_text="Its fair share of the pool: pool × weight / weights, to one decimal.")
    above = serializers.BooleanField(help_text="It borrows more than its fair share: its borrowed work is reclaimed first.")
    borrowers = BorrowerSerializer(many=True, help_text="The other teams of its cohort borrowing it.")


class ClusterPictureSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=Team.SyncState.choices)
    error = serializers.CharField(help_text="Why the last apply failed, or why the team cannot be provisioned (its namespace "
                                  "or ClusterQueue exists and was not created by the portal for it); empty when neither.")
    synced_at = serializers.DateTimeField(allow_null=True, help_text="The last successful apply.")
    checked_at = serializers.DateTimeField(
        allow_null=True, help_text="When the periodic team pass last compared every team's objects with the cluster "
                                   "(and repaired any drift); null until it has run once.")
    unreachable = serializers.CharField(help_text="Set when the cluster did not answer for the live usage.")
    usage = QueueUsageSerializer(many=True)
    fair_shares = FairShareSerializer(
        many=True, help_text="Per GPU flavor its cohort's teams borrow now: the team's part against its fair share by "
                             "weight (empty where the queue backend has no fair sharing).")


class TeamCreateSerializer(StrictInputMixin, serializers.Serializer):
    slug = serializers.CharField(help_text="Becomes the namespace; cannot change later.")
    name = serializers.CharField()
    cost_center = serializers.CharField(allow_blank=True, default="")
    description = serializers.CharField(allow_blank=True, default="")


class WeightField(serializers.DecimalField):
    """A fair-share weight, read by services.fair_share_weight_input (ASCII digits, refused in words)."""

    def __init__(self, **kwargs: Any) -> None:
        for key in ("max_digits", "decimal_places", "min_value", "max_value", "validators"):
            kwargs.pop(key, None)
        super().__init__(max_digits=5, decimal_places=2, **kwargs)

    def to_internal_value(self, data: Any) -> Decimal:
        try:
            return services.fair_share_weight_input(data)
        except DomainError as refusal:
            raise serializers.ValidationError(refusal.message) from None


class TeamUpdateSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        "slug": "A team's slug is its Kubernetes namespace and cannot change after the team is created.",
    }

    name = serializers.CharField(required=False)
    cost_center = serializers.CharField(allow_blank=True, required=False,
                                        help_text="Finance and platform admins only: the monthly statements bill it.")
    description = serializers.CharField(allow_blank=True, required=False)
    person_gpu_limit = serializers.CharField(
        allow_blank=True, allow_null=True, required=False,
        help_text="Leads: GPUs each member's workloads may hold at once (a slice counts its fraction); more of "
                  "theirs waits in the portal until their own work ends. Empty or null: no limit.")
    person_share_percent = serializers.CharField(
        allow_blank=True, allow_null=True, required=False,
        help_text="Leads: the percent of the team's guaranteed GPUs each member's workloads may hold at once (with "
                  "person_gpu_limit too, the smaller holds). Empty or null: none.")
    department: serializers.SlugRelatedField[Department] = serializers.SlugRelatedField(
        slug_field="slug", queryset=Department.objects.all(), allow_null=True, required=False,
        error_messages={"does_not_exist": "There is no department “{value}”; /api/departments/ lists them by slug."},
        help_text="The slug of the department it belongs to, or null for none. Platform admins only.")
    may_borrow = serializers.BooleanField(required=False, help_text="Platform admins only.")
    lends_idle = serializers.BooleanField(required=False, help_text="Platform admins only.")
    fair_share_weight = WeightField(
        required=False, help_text="Against the other teams of its cohort when they compete for idle quota: shares "
                                  "converge to the weights' ratio; 0 borrows only what nobody else wants. Platform admins only.")
    cpu_limit_cores = WholeNumberSerializerField(required=False, min_value=1, help_text="Platform admins only.")
    memory_limit_gib = WholeNumberSerializerField(required=False, min_value=1, help_text="Platform admins only.")
    pod_limit = WholeNumberSerializerField(required=False, min_value=1, help_text="Platform admins only.")
    storage_quota = serializers.DictField(
        child=WholeNumberSerializerField(min_value=0), required=False,
        help_text="GiB the team's data volumes may ask for, per storage class ({\"standard\": 500}); the whole map. "
                  "Platform admins only.")
    requires_second_approver = serializers.BooleanField(
        required=False, help_text="Whoever files a quota request cannot approve it. Platform admins only."
    )


# --- Memberships -------------------------------------------------------------------------------


class MembershipSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "team", "username", "role", "created_at"]
        read_only_fields = fields


ROLE_ERRORS: dict[str, str | StrPromise] = {"invalid_choice": "“{input}” is not a role; choose member or lead."}


class MembershipCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    # Looked up by the service, after it has checked that the caller may add members: a lookup
    # here would tell anyone whether an account exists.
    username = serializers.CharField(help_text="The person to add.")
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER,
                                   error_messages=ROLE_ERRORS)


class MembershipUpdateSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        "team": "A membership cannot move to another team; add the person to that team instead.",
        "user": "A membership cannot change its person; remove it and add the other person.",
        "username": "A membership cannot change its person; remove it and add the other person.",
    }

    role = serializers.ChoiceField(choices=Membership.Role.choices, error_messages=ROLE_ERRORS)


# --- Flavors -----------------------------------------------------------------------------------


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
    resource_per_unit = serializers.IntegerField(
        source="flavor.resource_per_unit", help_text="How much of resource_name one unit asks for.")
    extra_resources = serializers.ListField(
        source="flavor.extra_resources", child=serializers.DictField(),
        help_text="What else one unit asks for: name, per_unit and, where the device plugin reads the amount as each "
                  "device's, per_device.")
    device_class_name = serializers.CharField(
        source="flavor.device_class_name",
        help_text="The DRA DeviceClass its pods claim devices of; empty where a device plugin's resource is requested.")
    node_labels = serializers.DictField(source="flavor.node_labels", child=serializers.CharField())
    tolerations = serializers.ListField(source="flavor.tolerations", child=serializers.DictField())
    runtime_class_name = serializers.CharField(
        source="flavor.runtime_class_name", help_text="The RuntimeClass its pods run with; empty for the nodes' default.")
    is_active = serializers.BooleanField(source="flavor.is_active")
    created_at = serializers.DateTimeField(source="flavor.created_at")
    nodes_problem = serializers.CharField(
        source="flavor.nodes_problem",
        help_text="Why the nodes behind the flavor disagree with it, as the last node check found; while not empty, "
                  "launches on it are refused.")
    nodes_warnings = serializers.ListField(
        source="flavor.nodes_warning_list", child=serializers.CharField(),
        help_text="What the last node check noticed that does not refuse launches (no node yet, unhealthy devices, "
                  "fewer units than the capacity).")
    nodes_checked_at = serializers.DateTimeField(
        source="flavor.nodes_checked_at", allow_null=True, help_text="When the nodes were last checked; null: never.")
    nodes_offered_units = serializers.IntegerField(
        source="flavor.nodes_offered", allow_null=True,
        help_text="Units its ready, schedulable nodes offered at the last node check; null: never checked.")
    capacity_units = serializers.IntegerField(source="capacity", help_text="Units the cluster has.")
    guaranteed_units = serializers.IntegerField(source="guaranteed", help_text="Units all teams are guaranteed.")
    free_units = serializers.IntegerField(source="free", help_text="Units no team is guaranteed yet.")
    team_guaranteed_units = serializers.IntegerField(
        source="team_guaranteed", allow_null=True, help_text="With ?team=, the units that team is guaranteed."
    )


class FlavorWriteSerializer(StrictInputMixin, serializers.ModelSerializer):
    # Whole numbers in ASCII digits, as the rest of the API reads them, within the model's bounds.
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.PositiveSmallIntegerField: WholeNumberSerializerField,
                                models.PositiveIntegerField: WholeNumberSerializerField}

    class Meta:
        model = Flavor
        fields = ["name", "slug", "resource_name", "sharing_mode", "gpu_model", "fraction_numerator",
                  "fraction_denominator", "capacity_units", "resource_per_unit", "extra_resources", "device_class_name",
                  "node_labels", "tolerations", "runtime_class_name", "is_active"]


# --- Departments -------------------------------------------------------------------------------


class DepartmentSerializer(serializers.ModelSerializer):
    teams: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", many=True, read_only=True)
    heads: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True, help_text="Usernames of those who decide its teams' quota "
                                                                    "requests above their leads.")
    pool = serializers.SerializerMethodField(
        help_text="Units per flavor slug it guarantees its teams together beyond their own guarantees ({} for none): "
                  "their work runs on it as borrowed, and no team outside it uses it but what it lends.")

    class Meta:
        model = Department
        fields = ["id", "slug", "name", "pool", "borrowing_limit", "lending_limit", "fair_share_weight", "heads",
                  "head_approves", "teams", "created_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_pool(self, department: Department) -> dict[str, int]:
        return {row.flavor.slug: row.units for row in department.pool_in_force()}


class DepartmentWriteSerializer(StrictInputMixin, serializers.ModelSerializer):
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.PositiveIntegerField: WholeNumberSerializerField, models.DecimalField: WeightField}
    heads = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, max_length=100,
        help_text="Usernames of its heads, replacing those it has; leave out to keep them.")
    pool = serializers.DictField(
        child=WholeNumberSerializerField(min_value=0), required=False, allow_empty=True,
        help_text="Units per flavor slug it guarantees its teams together, replacing its pool (a flavor left out or "
                  "at 0 has none); leave out to keep it.")

    class Meta:
        model = Department
        fields = ["name", "slug", "pool", "borrowing_limit", "lending_limit", "fair_share_weight", "heads",
                  "head_approves"]

    def validate_heads(self, names: list[str]) -> list[Any]:
        try:
            return services.department_heads_input(names)
        except DomainError as refusal:
            raise serializers.ValidationError(refusal.message) from None

    def validate_pool(self, entries: dict[str, int]) -> dict[Flavor, int]:
        try:
            return services.department_pool_input(entries)
        except DomainError as refusal:
            raise serializers.ValidationError(refusal.message) from None


# --- Quota requests ----------------------------------------------------------------------------


class QuotaLineSerializer(serializers.Serializer):
    flavor = serializers.IntegerField(source="flavor.pk", help_text="Flavor id.")
    flavor_slug = serializers.CharField(source="flavor.slug")
    flavor_name = serializers.CharField(source="flavor.name")
    units = serializers.IntegerField()
    approved_units = serializers.IntegerField(
        allow_null=True, help_text="What was granted: the units asked or fewer; null until approved.")
    endorsed_units = serializers.IntegerField(
        allow_null=True, help_text="What a lead passed on to the department's head: the units asked or fewer; null "
                                   "where no lead has.")


class UnitsField(WholeNumberSerializerField):
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
            raise serializers.ValidationError(error_sentences(exc.detail, keyed=False)) from None


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
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requester: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
    )
    endorsed_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="Where the team's department has two approval levels: the lead who approved it for the team (or "
                  "filed it); a head of the department decides it then.")
    waits_for = serializers.SerializerMethodField(
        help_text="Who decides it now, while pending: “lead” or “department head”; null once decided.")
    lines = QuotaLineSerializer(many=True, read_only=True)

    class Meta:
        model = QuotaRequest
        fields = ["id", "team", "requester", "status", "waits_for", "justification", "starts_on", "ends_on", "renews",
                  "created_at", "endorsed_by", "endorsed_at", "endorsement_note", "decided_by", "decided_at",
                  "decision_note", "lines"]
        read_only_fields = fields

    def get_waits_for(self, quota_request: QuotaRequest) -> str | None:
        if not quota_request.is_pending:
            return None
        return "department head" if quota_request.waits_for_head else "lead"


class QuotaRequestCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    lines = QuotaLineInputSerializer(many=True, required=False)
    justification = serializers.CharField(allow_blank=True, default="", help_text="Why the team needs it.")
    starts_on = serializers.DateField(allow_null=True, default=None,
                                      help_text="First day of quota reserved for a later window; leave out for quota from "
                                                "approval.")
    ends_on = serializers.DateField(allow_null=True, default=None,
                                    help_text="Last day of temporary quota; leave out for permanent.")
    renews = WholeNumberSerializerField(allow_null=True, default=None, min_value=1,
                                        help_text="Id of an approved temporary request whose grants this one continues.")


class QuotaDecisionSerializer(StrictInputMixin, serializers.Serializer):
    note = serializers.CharField(allow_blank=True, default="", help_text="Shown to the requester.")


class ApprovedLineSerializer(StrictInputMixin, serializers.Serializer):
    flavor = WholeNumberSerializerField(help_text="Flavor id of one of the request's lines.")
    units = UnitsField(help_text="Units to grant: from 1 to the units asked.")


class QuotaApprovalSerializer(QuotaDecisionSerializer):
    lines = ApprovedLineSerializer(
        many=True, required=False, default=list,
        help_text="Approve fewer units than asked on some lines; a line left out is approved as asked.")


# --- Grants and the audit trail ----------------------------------------------------------------


class QuotaGrantSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor_slug = serializers.CharField(source="flavor.slug", read_only=True)
    flavor_name = serializers.CharField(source="flavor.name", read_only=True)
    is_active = serializers.BooleanField(read_only=True)
    last_day = serializers.DateField(read_only=True, allow_null=True,
                                     help_text="The last day it counts (the request's end date); valid_until is the "
                                               "midnight after it, in the site's time zone. Null when permanent.")

    class Meta:
        model = QuotaGrant
        fields = ["id", "team", "flavor", "flavor_slug", "flavor_name", "units", "request", "valid_from",
                  "valid_until", "last_day", "ended_at", "is_active"]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    # SerializerMetaclass takes declared fields out of the class body, so Serializer.data stays the property.
    data = serializers.DictField(read_only=True)  # type: ignore[assignment]

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "actor", "action", "object_type", "object_id", "team_id", "message", "data"]
        read_only_fields = fields
