"""What the template and workload API endpoints read and write, and how their input is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs import policy, selectors, services
from jobs.idle_policy import IdleAction
from jobs.models import (
    EndpointKey,
    GitSource,
    ImageRegistry,
    Priority,
    RunInterval,
    RunIntervalSwitch,
    TeamCredential,
    TeamVolume,
    Workload,
    WorkloadKind,
    WorkloadTemplate,
    WorkloadTemplateVersion,
    WorkloadTransition,
)
from jobs.parameters import CREDENTIAL_KINDS
from jobs.parameters import TYPES as PARAMETER_TYPES
from portal.adapters import StrictInputMixin, WholeNumberSerializerField
from portal.models import User
from tenants import queueing
from tenants.models import Flavor, Team
from tenants.serializers import VisibleTeamField

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

# A template's default priority is documented as its own enum: sharing PriorityEnum under a second
# field name needs an ENUM_NAME_OVERRIDES entry in the settings, which the schema check would
# otherwise fail on.
DEFAULT_PRIORITY_CHOICES = [(value, value) for value in Priority.values]

PRIORITY_ERRORS: dict[str, str | StrPromise] = {
    "invalid_choice": f"“{{input}}” is not a priority; choose one of {', '.join(Priority.values)}.",
}



def limit_field(name: str) -> WholeNumberSerializerField:
    """A template limit, bounded as jobs/policy.LIMITS says, refused with the policy's sentence."""
    low, high = policy.LIMITS[name]
    sentence = f"{policy.WORDS[name]} must be a whole number from {low:,} to {high:,}."
    return WholeNumberSerializerField(min_value=low, max_value=high, required=False,
                                      error_messages={"min_value": sentence, "max_value": sentence, "invalid": sentence})


KIND_ERRORS: dict[str, str | StrPromise] = {
    "invalid_choice": f"“{{input}}” is not a kind; choose one of {', '.join(WorkloadKind.values)}.",
}


# --- Shared fields -----------------------------------------------------------------------------


class FlavorBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()


@extend_schema_field(OpenApiTypes.NUMBER)
class NumberField(serializers.Field):
    """A whole or decimal number, kept as it was given (a bound of 1 stays 1, not 1.0)."""

    default_error_messages = {"invalid": "“{value}” is not a number."}

    def to_internal_value(self, data: Any) -> int | float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid", value=data)
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(OpenApiTypes.ANY)
class AnyValueField(serializers.JSONField):
    """A parameter value: a number, a string or true/false."""


class FlavorSlugsField(serializers.SlugRelatedField):
    default_error_messages = {
        "does_not_exist": "There is no flavor “{value}”; see /api/flavors/ for their slugs.",
        "invalid": "A flavor is named by its slug, e.g. “h100-80gb”.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", queryset=Flavor.objects.all(), **kwargs)


# --- Templates ---------------------------------------------------------------------------------


class ParameterSerializer(StrictInputMixin, serializers.Serializer):
    """One setting a template lets users choose, with its type and bounds."""

    name = serializers.CharField(help_text="Lowercase letters, digits and underscores; used as {name} in args and env.")
    type = serializers.ChoiceField(choices=[(t, t) for t in PARAMETER_TYPES])
    default = AnyValueField(required=False, allow_null=True)
    min = NumberField(required=False, allow_null=True, help_text="int and float only.")
    max = NumberField(required=False, allow_null=True, help_text="int and float only.")
    choices = serializers.ListField(child=serializers.CharField(), required=False, help_text="choice only.")
    prefixes = serializers.ListField(child=serializers.CharField(), required=False,
                                     help_text="image and git only: where values may come from, e.g. ghcr.io/acme.")
    names = serializers.ListField(child=serializers.CharField(), required=False,
                                  help_text="env only: the variables people may set.")
    max_items = WholeNumberSerializerField(required=False, help_text="args only: at most this many arguments.")
    max_length = WholeNumberSerializerField(required=False, help_text="args only: each at most this many characters.")
    mount_path = serializers.CharField(required=False, help_text="volume, git and a git-ssh credential only: where the "
                                                                 "container sees it.")
    credential_kind = serializers.ChoiceField(
        choices=[(kind, kind) for kind in CREDENTIAL_KINDS], required=False,
        help_text="credential only: which kind of the team's credentials it takes (s3: the AWS_* variables; git-ssh: "
                  "files at mount_path; registry: the image pull secret).")
    # DRF's metaclass takes declared fields out of the class, so this never shadows Field.read_only.
    read_only = serializers.BooleanField(  # type: ignore[assignment]
        required=False, help_text="volume only: false lets the workload write (read-only when left out).")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        # Declarations are stored as given: show only the keys a declaration has.
        return {key: value for key, value in super().to_representation(instance).items() if key in instance}


class TemplateVersionSerializer(serializers.ModelSerializer):
    flavors = FlavorBriefSerializer(many=True, read_only=True, help_text="The flavors a workload may run on.")
    parameters = ParameterSerializer(many=True, read_only=True)
    default_priority = serializers.ChoiceField(choices=DEFAULT_PRIORITY_CHOICES, read_only=True)
    allowed_priorities = serializers.ListField(
        child=serializers.CharField(), read_only=True,
        help_text="The tiers (of low, normal, high) members may launch at; the team's leads and platform admins may "
                  "use any tier.")
    command = serializers.ListField(child=serializers.CharField(), read_only=True)
    args = serializers.ListField(child=serializers.CharField(), read_only=True)
    env = serializers.DictField(child=serializers.CharField(), read_only=True)
    # Blank is the platform's default: said as the writing serializer says it, so the schema allows "".
    idle_action = serializers.ChoiceField(choices=IdleAction.choices, allow_blank=True, read_only=True)

    class Meta:
        model = WorkloadTemplateVersion
        fields = ["number", "created_at", "image", "command", "args", "env", "flavors", "default_units", "max_units",
                  "default_cpu", "max_cpu", "default_memory_gib", "max_memory_gib", "default_priority",
                  "allowed_priorities", "max_runtime_seconds", "storage_gib", "idle_minutes", "port", "parameters",
                  "idle_threshold_percent", "idle_window_minutes", "idle_action", "idle_grace_minutes"]
        read_only_fields = fields


class TemplateSerializer(serializers.ModelSerializer):
    owner_team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="Set for a team template, managed by that team's leads.",
    )
    version = serializers.SerializerMethodField(help_text="The current version: what a launch uses now.")
    shared_with: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        source="teams", slug_field="slug", many=True, read_only=True,
        help_text="When not global: the teams that may use it (set with POST …/share/).")

    class Meta:
        model = WorkloadTemplate
        fields = ["id", "slug", "name", "kind", "description", "is_global", "shared_with", "owner_team", "is_active",
                  "created_at", "version"]
        read_only_fields = fields

    @extend_schema_field(TemplateVersionSerializer)
    def get_version(self, template: WorkloadTemplate) -> dict[str, Any]:
        # templates_with_current_version prefetches the current version, so a page of templates costs no more than one.
        return TemplateVersionSerializer(template.current_versions[0]).data  # type: ignore[attr-defined]


class TemplateSettingsSerializer(StrictInputMixin, serializers.Serializer):
    """The settings a version holds; every one optional when revising."""

    flavors = FlavorSlugsField(many=True, required=False, help_text="Flavor slugs the template may run on.")
    image = serializers.CharField(required=False)
    command = serializers.ListField(child=serializers.CharField(), required=False)
    args = serializers.ListField(child=serializers.CharField(), required=False, help_text="May use {parameter} placeholders.")
    env = serializers.DictField(child=serializers.CharField(), required=False, help_text="May use {parameter} placeholders.")
    default_units = limit_field("default_units")
    max_units = limit_field("max_units")
    default_cpu = limit_field("default_cpu")
    max_cpu = limit_field("max_cpu")
    default_memory_gib = limit_field("default_memory_gib")
    max_memory_gib = limit_field("max_memory_gib")
    default_priority = serializers.ChoiceField(choices=DEFAULT_PRIORITY_CHOICES, required=False,
                                               error_messages=PRIORITY_ERRORS)
    allowed_priorities = serializers.ListField(
        child=serializers.CharField(), required=False, allow_empty=False,
        error_messages={"empty": "Allowed priorities must name at least one tier."},
        help_text="The tiers members may launch at, of low, normal and high (low and normal when left out); the "
                  "team's leads and platform admins may use any tier. Must include default_priority.")
    max_runtime_seconds = limit_field("max_runtime_seconds")
    storage_gib = limit_field("storage_gib")
    idle_minutes = limit_field("idle_minutes")
    port = limit_field("port")
    parameters = ParameterSerializer(many=True, required=False)
    idle_threshold_percent = WholeNumberSerializerField(
        required=False, allow_null=True, help_text="Idle below this GPU engine-active %; null: the platform's default.")
    idle_window_minutes = WholeNumberSerializerField(
        required=False, allow_null=True, help_text="Idle this long before the owner is warned; null: the platform's default.")
    idle_action = serializers.ChoiceField(
        choices=IdleAction.choices, required=False, allow_blank=True,
        help_text="notify, stop, or scale_to_min (inference); blank: the platform's default.")
    idle_grace_minutes = WholeNumberSerializerField(
        required=False, allow_null=True, help_text="Between the warning and the action; null: the platform's default.")
    # Where the cluster dry-runs what a launch would create before anything is saved (the API's
    # descriptions say how it is chosen when left out).
    check_in = VisibleTeamField(required=False)


    def validate_allowed_priorities(self, value: list[str]) -> list[str]:
        for tier in value:
            if tier not in Priority.values:
                raise serializers.ValidationError(str(PRIORITY_ERRORS["invalid_choice"]).format(input=tier))
        return value


class TemplateCreateSerializer(TemplateSettingsSerializer):
    slug = serializers.SlugField(max_length=40, help_text="A short name, unique among the owner team's templates (or the "
                                 "portal's own); cannot change later. Launches name the template by its id.")
    name = serializers.CharField(max_length=80)
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, error_messages=KIND_ERRORS)
    description = serializers.CharField(allow_blank=True, default="")
    # A team template, which that team's leads manage; left out for a global one.
    owner_team = VisibleTeamField(required=False, allow_null=True, default=None)
    flavors = FlavorSlugsField(many=True, help_text="Flavor slugs the template may run on.")
    image = serializers.CharField()



class TemplatePublishedSerializer(TemplateSerializer):
    checked_in = serializers.SerializerMethodField(
        help_text="The team whose namespace admitted the version in a dry run; null when no team was in the cluster "
                  "to check in (nothing was dry-run).")

    class Meta(TemplateSerializer.Meta):
        fields = [*TemplateSerializer.Meta.fields, "checked_in"]
        read_only_fields = fields

    def get_checked_in(self, template: WorkloadTemplate) -> str | None:
        team = self.context.get("checked_in")
        return team.slug if team is not None else None


class TemplateShareSerializer(StrictInputMixin, serializers.Serializer):
    is_global = serializers.BooleanField(help_text="Every team may use it; teams is then ignored and emptied.")
    teams = serializers.ListField(child=VisibleTeamField(), required=False, default=list,
                                  help_text="When not global: the slugs of the teams that may use it.")


class TemplateReviseSerializer(TemplateSettingsSerializer):
    refusals = {
        key: f"A template's {key} cannot change; only the settings of a new version can (image, flavors, units, ...)."
        for key in ("slug", "name", "kind", "description", "owner_team", "is_global", "is_active")
    } | {"version": "The version number is given by the portal: each edit makes the next one."}


# --- Workloads ---------------------------------------------------------------------------------


class TransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadTransition
        fields = ["phase", "reason", "at"]
        read_only_fields = fields


class IntervalSwitchSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunIntervalSwitch
        fields = ["at", "borrowed"]
        read_only_fields = fields


class RunIntervalSerializer(serializers.ModelSerializer):
    """A pod's time on a GPU node with what billing meters it by: an auditor recomputes the
    workload's cost from these and the rate card."""

    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, help_text="The flavor the pod ran on (Kueue's admission, its node).")
    borrowed = serializers.BooleanField(read_only=True, help_text="Whether it began on quota borrowed from other teams.")
    switches = IntervalSwitchSerializer(many=True, read_only=True,
                                        help_text="Each moment it moved between guaranteed and borrowed quota, oldest first.")

    class Meta:
        model = RunInterval
        fields = ["pod_name", "node", "flavor", "resource_name", "units", "fraction_numerator", "fraction_denominator",
                  "started_at", "ended_at", "borrowed", "switches"]
        read_only_fields = fields


class WorkloadSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(slug_field="username", read_only=True)
    template = serializers.CharField(source="template_version.template.slug", read_only=True,
                                     help_text="The template's slug, for people; template_id names it.")
    template_id = serializers.IntegerField(source="template_version.template_id", read_only=True)
    template_version = serializers.IntegerField(source="template_version.number", read_only=True)
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, read_only=True)
    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True,
        help_text="The flavor it runs on: the one launched on, or the one Kueue admitted it on where it accepts several.")
    accepted_flavors: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True,
        help_text="Every flavor the launch accepts when it named several; empty when only its flavor.")
    total_units = serializers.IntegerField(read_only=True, help_text="units × workers")
    endpoint = serializers.SerializerMethodField(help_text="Where an inference server or notebook answers; null otherwise.")

    class Meta:
        model = Workload
        fields = ["id", "name", "team", "owner", "template", "template_id", "template_version", "kind",
                   "phase", "reason", "on_borrowed", "waits_for_person_limit",
                  "flavor", "accepted_flavors", "units", "workers", "total_units", "cpu", "memory_gib", "priority", "endpoint",
                  "relaunch_of", "created_at", "submitted_at", "finished_at"]
        read_only_fields = fields

    def get_endpoint(self, workload: Workload) -> str | None:
        return services.endpoint(workload) if workload.kind_facts.serves_http else None


class WorkloadDetailSerializer(WorkloadSerializer):
    parameters = serializers.SerializerMethodField(
        help_text="The values it was launched with; null for those who see the workload but not what it runs "
                  "(finance: its cost, not its code or data).")
    notebook_token_sha256 = serializers.SerializerMethodField(
        help_text="The SHA-256 of a notebook's token, shown to its owner only; the token itself is handed over by "
                  "POST /api/workloads/{id}/notebook-token/ and is stored nowhere in the portal.")
    transitions = TransitionSerializer(many=True, read_only=True, help_text="Every phase it went through, oldest first.")
    intervals = RunIntervalSerializer(many=True, read_only=True, help_text="Each pod's time on a GPU node.")

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "parameters", "notebook_token_sha256", "transitions", "intervals"]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(child=AnyValueField(), allow_null=True))
    def get_parameters(self, workload: Workload) -> dict[str, Any] | None:
        request = self.context.get("request")
        may_read = request is not None and request.user.has_perm("jobs.read_workload_parameters", workload)
        return dict(workload.parameters) if may_read else None

    def get_notebook_token_sha256(self, workload: Workload) -> str | None:
        request = self.context.get("request")
        is_owner = request is not None and request.user.pk == workload.owner_id
        return workload.notebook_token_sha256 or None if workload.kind_facts.has_token and is_owner else None


class EndpointKeySerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    revoked_by = serializers.CharField(source="revoked_by.username", read_only=True, default=None)
    shown = serializers.CharField(read_only=True, help_text="Its first characters, to tell keys apart; never the key.")

    class Meta:
        model = EndpointKey
        fields = ["id", "name", "shown", "created_by", "created_at", "last_used_at", "revoked_at", "revoked_by"]
        read_only_fields = fields


class EndpointKeyCreateSerializer(StrictInputMixin, serializers.Serializer):
    name = serializers.CharField(max_length=60, help_text="After the program that uses it, e.g. eval-nightly.")


class EndpointKeyMadeSerializer(EndpointKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The key, in this answer only: programs send it as "
                                                          "`Authorization: Bearer <key>`.")

    class Meta(EndpointKeySerializer.Meta):
        fields = [*EndpointKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class NotebookTokenSerializer(serializers.Serializer):
    notebook_token = serializers.CharField(help_text="The notebook's login token. Jupyter asks for it once per browser.")


@extend_schema_field(OpenApiTypes.STR)
class TemplateReferenceField(serializers.Field):
    """A template named by its id, among the templates the caller can see; a slug is taken too
    (scripts written before slugs were per team) when exactly one template the caller can see has it."""

    default_error_messages = {
        "does_not_exist": "There is no template “{value}” that you can see; see /api/templates/.",
        "ambiguous": "Several templates you can see are named “{value}” (ids {ids}); name the one you mean by its id.",
        "invalid": "A template is named by its id (see /api/templates/), e.g. 12.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(help_text="The template's id (a slug works where only one template you can see has it).", **kwargs)

    def to_internal_value(self, data: Any) -> WorkloadTemplate:
        if isinstance(data, bool) or not isinstance(data, str | int) or not str(data).strip():
            self.fail("invalid")
        visible = WorkloadTemplate.objects.for_user(self.context["request"].user)
        found = list(selectors.templates_named(templates=visible, reference=data).order_by("pk")[:10])
        if not found:
            self.fail("does_not_exist", value=data)
        if len(found) > 1:
            self.fail("ambiguous", value=data, ids=", ".join(str(t.pk) for t in found))
        return found[0]

    def to_representation(self, value: WorkloadTemplate) -> int:
        return value.pk


class WorkloadLaunchSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        key: f"{key} cannot be set at launch; the portal and the cluster decide it."
        for key in ("phase", "reason", "on_borrowed", "owner", "workers", "notebook_token", "notebook_token_sha256")
    }

    team = serializers.SlugField(help_text="The team's slug; the workload runs in its namespace and quota.")
    template = TemplateReferenceField()
    flavor = serializers.SlugRelatedField(
        slug_field="slug", queryset=Flavor.objects.all(), help_text="Flavor slug; one the template allows.",
        error_messages={"does_not_exist": "There is no flavor “{value}”; see /api/flavors/ for their slugs."},
    )
    units = WholeNumberSerializerField(required=False, allow_null=True, default=None,
                                     help_text="GPU units per worker; the template's default when left out.")
    cpu = WholeNumberSerializerField(required=False, allow_null=True, default=None, help_text="CPU cores; template default.")
    memory_gib = WholeNumberSerializerField(required=False, allow_null=True, default=None,
                                            help_text="Memory; template default.")
    priority = serializers.ChoiceField(choices=Priority.choices, required=False, allow_null=True, default=None,
                                       error_messages=PRIORITY_ERRORS, help_text="The template's default when left out.")
    name = serializers.CharField(max_length=60, required=False, allow_blank=True, default="",
                                 help_text="Defaults to the template's slug.")
    parameters = serializers.DictField(child=AnyValueField(), required=False, default=dict,
                                       help_text="Values for the template's parameters, by name.")
    also_accept = FlavorSlugsField(
        many=True, required=False, default=list,
        help_text="Other flavors it may run on (slugs; of the flavor's resource name, each allowed by the template): "
                  "Kueue admits it on the first with room, and it is billed as the one it runs on.")


class AllowListEntrySerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        fields = ["id", "prefix", "note", "created_by", "created_at"]
        read_only_fields = fields


class ImageRegistrySerializer(AllowListEntrySerializer):
    class Meta(AllowListEntrySerializer.Meta):
        model = ImageRegistry


class GitSourceSerializer(AllowListEntrySerializer):
    class Meta(AllowListEntrySerializer.Meta):
        model = GitSource


class ImageRegistryCreateSerializer(StrictInputMixin, serializers.Serializer):
    prefix = serializers.CharField(max_length=255, help_text="A registry host, optionally with a path: nvcr.io/nvidia.")
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class GitSourceCreateSerializer(ImageRegistryCreateSerializer):
    prefix = serializers.CharField(max_length=255, help_text="A git host, optionally with a path: github.com/acme.")


class WhyWaitingSerializer(serializers.Serializer):
    class UsageSerializer(serializers.Serializer):
        guaranteed = serializers.IntegerField(help_text="Units of the flavor the team is guaranteed.")
        in_use = serializers.IntegerField()
        borrowed = serializers.IntegerField(help_text="Units running on other teams' idle quota.")
        lent = serializers.IntegerField(help_text="The team's idle units in use by other teams.")
        free = serializers.IntegerField(help_text="Guaranteed units not in use.")

    class HolderSerializer(serializers.Serializer):
        team = serializers.CharField()
        in_use = serializers.IntegerField(help_text="Units of the flavor its queue uses now.")
        borrowed = serializers.IntegerField(help_text="Of those, units on other teams' idle quota.")
        guaranteed = serializers.IntegerField()

    phase = serializers.ChoiceField(choices=Workload.Phase.choices)
    reason = serializers.CharField(help_text="Kueue's reason, in the portal's words.")
    position = serializers.IntegerField(
        help_text="1 = the first of the team's waiting workloads Kueue tries; 0 = not waiting. Kueue may still start a "
                  "later one first when it fits the free quota.")
    position_source = serializers.ChoiceField(
        choices=[*((name, make().position_words) for name, make in queueing.BACKENDS.items()),
                 ("estimate", "the portal's estimate")],
        help_text="kueue when the cluster serves visibility.kueue.x-k8s.io, else the portal's own ordering.")
    ahead = serializers.ListField(child=serializers.IntegerField(), help_text="Ids of the team's workloads in front of it.")
    usage = UsageSerializer(allow_null=True, help_text="The team's quota of the flavor; null when the cluster did not answer.")
    holders = HolderSerializer(many=True, help_text="Teams using the flavor now, and how much of it they borrow.")
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="An estimate: when running jobs' maximum run times free enough units; null when "
                                   "none can be made.")
    estimate_basis = serializers.CharField(help_text="What the estimate rests on, in words.")
    fairness = serializers.CharField(
        help_text="Where fair sharing between teams is why it waits: how the borrowed units are split by weight and "
                  "what that means for it, in words; empty otherwise.")
    order = serializers.CharField(
        help_text="Where the team's waiting work is admitted by its people's recent use (Kueue's admission fair "
                  "sharing): the owner's recent use and that of the people whose work is ahead, in words; empty "
                  "otherwise.")


class ScaleSerializer(StrictInputMixin, serializers.Serializer):
    replicas = WholeNumberSerializerField(min_value=1)


class LogsSerializer(serializers.Serializer):
    pod = serializers.CharField(help_text="The newest pod, whose log this is; empty before a pod exists.")
    lines = serializers.ListField(child=serializers.CharField())
    unreachable = serializers.CharField(help_text="Set when the cluster did not answer, or `pod` is not one of the workload's.")
    pods = serializers.ListField(child=serializers.CharField(), help_text="Every pod of the workload, newest first.")


# --- Data volumes ----------------------------------------------------------------------------------


class TeamVolumeSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    applied = serializers.BooleanField(read_only=True, help_text="Its claim is in the cluster as asked (made, and grown "
                                                                 "to size_gib); until then the repair pass finishes it.")

    class Meta:
        model = TeamVolume
        fields = ["id", "team", "name", "storage_class", "size_gib", "shared", "state", "applied", "created_by", "created_at"]
        read_only_fields = fields


class TeamVolumeCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    name = serializers.CharField(max_length=63, help_text="The claim's name; launches mount it by this name.")
    storage_class = serializers.CharField(max_length=253, help_text="One of the team's storage quota's classes.")
    size_gib = WholeNumberSerializerField(min_value=1)
    shared = serializers.BooleanField(default=False, help_text="ReadWriteMany (many pods on any node), where the class can.")


class TeamVolumeResizeSerializer(StrictInputMixin, serializers.Serializer):
    size_gib = WholeNumberSerializerField(min_value=1, help_text="More than it asks for now: a volume only grows.")


# --- Credentials -----------------------------------------------------------------------------------


class TeamCredentialSerializer(serializers.ModelSerializer):
    """A credential as anyone may see it: never its values."""

    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    rotated_by = serializers.CharField(source="rotated_by.username", read_only=True, default=None)
    hint = serializers.CharField(read_only=True, help_text="What tells it apart and is not secret: an S3 key's last four "
                                                           "characters, a registry and user, a key's type.")

    class Meta:
        model = TeamCredential
        fields = ["id", "team", "name", "kind", "hint", "state", "created_by", "created_at", "rotated_by", "rotated_at"]
        read_only_fields = fields


class CredentialValuesSerializer(StrictInputMixin, serializers.Serializer):
    """A credential's values, write-only: which a kind takes is in jobs.credentials.FIELDS."""

    access_key_id = serializers.CharField(required=False, trim_whitespace=False, help_text="s3: needed.")
    secret_access_key = serializers.CharField(required=False, trim_whitespace=False, write_only=True, help_text="s3: needed.")
    endpoint = serializers.CharField(required=False, help_text="s3: for storage other than AWS.")
    region = serializers.CharField(required=False, help_text="s3: e.g. eu-west-1.")
    private_key = serializers.CharField(required=False, trim_whitespace=False, write_only=True,
                                        help_text="git-ssh: needed; without a passphrase.")
    known_hosts = serializers.CharField(required=False, trim_whitespace=False, help_text="git-ssh: the git host's keys.")
    server = serializers.CharField(required=False, help_text="registry: needed, e.g. ghcr.io.")
    username = serializers.CharField(required=False, help_text="registry: needed.")
    password = serializers.CharField(required=False, trim_whitespace=False, write_only=True, help_text="registry: needed.")


class TeamCredentialCreateSerializer(StrictInputMixin, serializers.Serializer):
    team = VisibleTeamField()
    name = serializers.CharField(max_length=40, help_text="Launches choose it by this name.")
    kind = serializers.ChoiceField(choices=TeamCredential.Kind.choices)
    values = CredentialValuesSerializer(help_text="Written into its Secret once; never returned.")


class TeamCredentialRotateSerializer(StrictInputMixin, serializers.Serializer):
    values = CredentialValuesSerializer(help_text="The new values, all of them: they replace the old ones.")
