"""API endpoints for workload templates and workloads.

Each endpoint parses, calls one service or selector and serializes. A workload changes state only
through its actions (launch, stop, relaunch); who may do what is decided by the services, and
what a caller may see by the scoped querysets, so another team's workload answers 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from jobs import selectors, services
from jobs.models import (
    Priority, RunInterval, Workload, WorkloadKind, WorkloadTemplate, WorkloadTemplateVersion, WorkloadTransition,
)
from jobs.parameters import TYPES as PARAMETER_TYPES
from portal.models import User
from tenants.api import StrictInputMixin, VisibleTeamField, _parse
from tenants.models import Flavor, Team

MAX_LOG_LINES = 5000
# A template's default priority is documented as its own enum: sharing PriorityEnum under a second
# field name needs an ENUM_NAME_OVERRIDES entry in the settings, which the schema check would
# otherwise fail on.
DEFAULT_PRIORITY_CHOICES = [(value, value) for value in Priority.values]
PRIORITY_ERRORS = {"invalid_choice": f"“{{input}}” is not a priority; choose one of {', '.join(Priority.values)}."}
KIND_ERRORS = {"invalid_choice": f"“{{input}}” is not a kind; choose one of {', '.join(WorkloadKind.values)}."}


class NothingVisible(Exception):
    """A list filter names something the caller cannot see: the list is empty, as for a filter
    that matches nothing, so the answer does not tell whether it exists."""


def _team_filter(request: Request) -> Team | None:
    slug = request.query_params.get("team")
    if not slug:
        return None
    team = Team.objects.for_user(request.user).filter(slug=slug).first()
    if team is None:
        raise NothingVisible
    return team


# --- Shared fields -------------------------------------------------------------------------


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


# --- Templates -----------------------------------------------------------------------------


class ParameterSerializer(StrictInputMixin, serializers.Serializer):
    """One setting a template lets users choose, with its type and bounds."""

    name = serializers.CharField(help_text="Lowercase letters, digits and underscores; used as {name} in args and env.")
    type = serializers.ChoiceField(choices=[(t, t) for t in PARAMETER_TYPES])
    default = AnyValueField(required=False, allow_null=True)
    min = NumberField(required=False, allow_null=True, help_text="int and float only.")
    max = NumberField(required=False, allow_null=True, help_text="int and float only.")
    choices = serializers.ListField(child=serializers.CharField(), required=False, help_text="choice only.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        # Declarations are stored as given: show only the keys a declaration has.
        return {key: value for key, value in super().to_representation(instance).items() if key in instance}


class TemplateVersionSerializer(serializers.ModelSerializer):
    flavors = FlavorBriefSerializer(many=True, read_only=True, help_text="The flavors a workload may run on.")
    parameters = ParameterSerializer(many=True, read_only=True)
    default_priority = serializers.ChoiceField(choices=DEFAULT_PRIORITY_CHOICES, read_only=True)
    command = serializers.ListField(child=serializers.CharField(), read_only=True)
    args = serializers.ListField(child=serializers.CharField(), read_only=True)
    env = serializers.DictField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = WorkloadTemplateVersion
        fields = ["number", "created_at", "image", "command", "args", "env", "flavors", "default_units", "max_units",
                  "default_cpu", "max_cpu", "default_memory_gib", "max_memory_gib", "default_priority",
                  "max_runtime_seconds", "storage_gib", "idle_minutes", "port", "parameters"]
        read_only_fields = fields


class TemplateSerializer(serializers.ModelSerializer):
    owner_team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True,
                                              help_text="Set for a team template, managed by that team's leads.")
    version = serializers.SerializerMethodField(help_text="The current version: what a launch uses now.")

    class Meta:
        model = WorkloadTemplate
        fields = ["id", "slug", "name", "kind", "description", "is_global", "owner_team", "is_active", "created_at",
                  "version"]
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
    default_units = serializers.IntegerField(min_value=1, required=False)
    max_units = serializers.IntegerField(min_value=1, required=False)
    default_cpu = serializers.IntegerField(min_value=1, required=False)
    max_cpu = serializers.IntegerField(min_value=1, required=False)
    default_memory_gib = serializers.IntegerField(min_value=1, required=False)
    max_memory_gib = serializers.IntegerField(min_value=1, required=False)
    default_priority = serializers.ChoiceField(choices=DEFAULT_PRIORITY_CHOICES, required=False,
                                               error_messages=PRIORITY_ERRORS)
    max_runtime_seconds = serializers.IntegerField(min_value=1, required=False)
    storage_gib = serializers.IntegerField(min_value=0, required=False)
    idle_minutes = serializers.IntegerField(min_value=0, required=False)
    port = serializers.IntegerField(min_value=0, max_value=65535, required=False)
    parameters = ParameterSerializer(many=True, required=False)


class TemplateCreateSerializer(TemplateSettingsSerializer):
    slug = serializers.SlugField(max_length=40, help_text="Names the template in launches; cannot change later.")
    name = serializers.CharField(max_length=80)
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, error_messages=KIND_ERRORS)
    description = serializers.CharField(allow_blank=True, default="")
    # A team template, which that team's leads manage; left out for a global one.
    owner_team = VisibleTeamField(required=False, allow_null=True, default=None)
    flavors = FlavorSlugsField(many=True, help_text="Flavor slugs the template may run on.")
    image = serializers.CharField()

    def validate_slug(self, value: str) -> str:
        if WorkloadTemplate.objects.filter(slug=value).exists():
            raise serializers.ValidationError(f"A template named “{value}” already exists; choose another slug.")
        return value


class TemplateReviseSerializer(TemplateSettingsSerializer):
    refusals = {
        key: f"A template's {key} cannot change; only the settings of a new version can (image, flavors, units, ...)."
        for key in ("slug", "name", "kind", "description", "owner_team", "is_global", "is_active")
    } | {"version": "The version number is given by the portal: each edit makes the next one."}


@extend_schema_view(
    list=extend_schema(parameters=[OpenApiParameter(
        "team", str, description="Only the templates the team with this slug can launch (active ones).")]),
    create=extend_schema(request=TemplateCreateSerializer, responses={201: TemplateSerializer},
                         description="Platform admins create global templates; team leads create templates of their "
                         "team (with owner_team)."),
    partial_update=extend_schema(request=TemplateReviseSerializer, responses={200: TemplateSerializer},
                                 description="Publishes a new version with the given settings changed; workloads keep "
                                 "the version they were launched with. Platform admins, and leads of the owner team."),
)
class TemplateViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Templates are never deleted here: running workloads refer to their versions."""

    serializer_class = TemplateSerializer
    queryset = WorkloadTemplate.objects.none()
    lookup_field = "slug"
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[WorkloadTemplate]:
        try:
            team = _team_filter(self.request) if self.action == "list" else None
        except NothingVisible:
            return WorkloadTemplate.objects.none()
        return selectors.templates_with_current_version(user=self.request.user, team=team)

    def _answer(self, template: WorkloadTemplate, code: int = status.HTTP_200_OK) -> Response:
        fresh = selectors.templates_with_current_version(user=self.request.user).get(pk=template.pk)
        return Response(self.get_serializer(fresh).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = services.template_create(user=request.user, **_parse(TemplateCreateSerializer, request))
        return self._answer(template, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = self.get_object()
        services.template_revise(user=request.user, template=template, **_parse(TemplateReviseSerializer, request))
        return self._answer(template)


# --- Workloads -----------------------------------------------------------------------------


class TransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadTransition
        fields = ["phase", "reason", "at"]
        read_only_fields = fields


class RunIntervalSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunInterval
        fields = ["pod_name", "node", "resource_name", "units", "started_at", "ended_at"]
        read_only_fields = fields


class WorkloadSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    template = serializers.CharField(source="template_version.template.slug", read_only=True)
    template_version = serializers.IntegerField(source="template_version.number", read_only=True)
    kind = serializers.ChoiceField(choices=WorkloadKind.choices, read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    total_units = serializers.IntegerField(read_only=True, help_text="units × workers")
    endpoint = serializers.SerializerMethodField(help_text="Where an inference server or notebook answers; null otherwise.")

    class Meta:
        model = Workload
        fields = ["id", "name", "team", "owner", "template", "template_version", "kind", "phase", "reason", "on_borrowed",
                  "flavor", "units", "workers", "total_units", "cpu", "memory_gib", "priority", "endpoint",
                  "relaunch_of", "created_at", "submitted_at", "finished_at"]
        read_only_fields = fields

    def get_endpoint(self, workload: Workload) -> str | None:
        return services.endpoint(workload) if workload.kind in (WorkloadKind.INFERENCE, WorkloadKind.NOTEBOOK) else None


class WorkloadDetailSerializer(WorkloadSerializer):
    parameters = serializers.DictField(read_only=True, child=AnyValueField())
    notebook_token = serializers.SerializerMethodField(help_text="A notebook's login token, shown to its owner only.")
    transitions = TransitionSerializer(many=True, read_only=True, help_text="Every phase it went through, oldest first.")
    intervals = RunIntervalSerializer(many=True, read_only=True, help_text="Each pod's time on a GPU node.")

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "parameters", "notebook_token", "transitions", "intervals"]
        read_only_fields = fields

    def get_notebook_token(self, workload: Workload) -> str | None:
        request = self.context.get("request")
        is_owner = request is not None and request.user.pk == workload.owner_id
        return workload.notebook_token if workload.kind == WorkloadKind.NOTEBOOK and is_owner else None


@extend_schema_field(OpenApiTypes.STR)
class TemplateSlugField(serializers.SlugRelatedField):
    """A template named by its slug, among the templates the caller can see."""

    default_error_messages = {
        "does_not_exist": "There is no template “{value}” that you can see; see /api/templates/.",
        "invalid": "A template is named by its slug, e.g. “pytorch-train”.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", help_text="The template's slug.", **kwargs)

    def get_queryset(self) -> QuerySet[WorkloadTemplate]:
        request = self.context.get("request")
        return WorkloadTemplate.objects.for_user(request.user if request else None)


class WorkloadLaunchSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        key: f"{key} cannot be set at launch; the portal and the cluster decide it."
        for key in ("phase", "reason", "on_borrowed", "owner", "workers", "notebook_token")
    }

    team = serializers.SlugField(help_text="The team's slug; the workload runs in its namespace and quota.")
    template = TemplateSlugField()
    flavor = serializers.SlugRelatedField(
        slug_field="slug", queryset=Flavor.objects.all(), help_text="Flavor slug; one the template allows.",
        error_messages={"does_not_exist": "There is no flavor “{value}”; see /api/flavors/ for their slugs."},
    )
    units = serializers.IntegerField(required=False, allow_null=True, default=None,
                                     help_text="GPU units per worker; the template's default when left out.")
    cpu = serializers.IntegerField(required=False, allow_null=True, default=None, help_text="CPU cores; template default.")
    memory_gib = serializers.IntegerField(required=False, allow_null=True, default=None, help_text="Memory; template default.")
    priority = serializers.ChoiceField(choices=Priority.choices, required=False, allow_null=True, default=None,
                                       error_messages=PRIORITY_ERRORS, help_text="The template's default when left out.")
    name = serializers.CharField(max_length=60, required=False, allow_blank=True, default="",
                                 help_text="Defaults to the template's slug.")
    parameters = serializers.DictField(child=AnyValueField(), required=False, default=dict,
                                       help_text="Values for the template's parameters, by name.")


PHASE_FILTER = OpenApiParameter("phase", str, enum=Workload.Phase.values)


class WhyWaitingSerializer(serializers.Serializer):
    class UsageSerializer(serializers.Serializer):
        guaranteed = serializers.IntegerField(help_text="Units of the flavor the team is guaranteed.")
        in_use = serializers.IntegerField()
        borrowed = serializers.IntegerField(help_text="Units running on other teams' idle quota.")
        lent = serializers.IntegerField(help_text="The team's idle units in use by other teams.")
        free = serializers.IntegerField(help_text="Guaranteed units not in use.")

    phase = serializers.ChoiceField(choices=Workload.Phase.choices)
    reason = serializers.CharField(help_text="Kueue's reason, in words.")
    position = serializers.IntegerField(help_text="1 = next among the team's queued workloads; 0 = not waiting.")
    ahead = serializers.ListField(child=serializers.IntegerField(), help_text="Ids of the team's workloads in front of it.")
    usage = UsageSerializer(allow_null=True, help_text="The team's quota of the flavor; null when the cluster did not answer.")


class ScaleSerializer(StrictInputMixin, serializers.Serializer):
    replicas = serializers.IntegerField(min_value=1)


class LogsSerializer(serializers.Serializer):
    pod = serializers.CharField(help_text="The newest pod, whose log this is; empty before a pod exists.")
    lines = serializers.ListField(child=serializers.CharField())
    unreachable = serializers.CharField(help_text="Set when the cluster did not answer.")


def _tail(request: Request) -> int:
    raw = request.query_params.get("tail", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LOG_LINES:
        raise serializers.ValidationError({"tail": [f"tail is a number of lines from 1 to {MAX_LOG_LINES}, not “{raw}”."]})
    return int(raw)


@extend_schema_view(
    list=extend_schema(parameters=[
        OpenApiParameter("team", str, description="Only workloads of the team with this slug."),
        PHASE_FILTER,
        OpenApiParameter("owner", str, description="“me”, or a username."),
        OpenApiParameter("template", str, description="Only workloads launched from the template with this slug."),
    ]),
    retrieve=extend_schema(responses={200: WorkloadDetailSerializer}),
    create=extend_schema(request=WorkloadLaunchSerializer, responses={201: WorkloadDetailSerializer},
                         description="Launches a workload from a template for one of the caller's teams. It is recorded "
                                     "as submitting and then queued in the team's Kueue queue."),
)
class WorkloadViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Workloads change state only through launch, stop and relaunch: no PUT, PATCH or DELETE."""

    serializer_class = WorkloadSerializer
    queryset = Workload.objects.none()

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return WorkloadSerializer if self.action == "list" else WorkloadDetailSerializer

    def get_queryset(self) -> QuerySet[Workload]:
        user = self.request.user
        if self.action != "list":
            return selectors.workloads_for_user(user=user).prefetch_related("transitions", "intervals")
        try:
            return selectors.workloads_for_user(user=user, **self._list_filters())
        except NothingVisible:
            return Workload.objects.none()

    def _list_filters(self) -> dict[str, Any]:
        params, user = self.request.query_params, self.request.user
        phase = params.get("phase") or None
        if phase and phase not in Workload.Phase.values:
            choices = ", ".join(Workload.Phase.values)
            raise serializers.ValidationError({"phase": [f"“{phase}” is not a phase; choose one of {choices}."]})
        owner = None
        if wanted := params.get("owner"):
            owner = user if wanted == "me" else User.objects.filter(username=wanted).first()
            if owner is None:
                raise NothingVisible
        template = None
        if slug := params.get("template"):
            template = WorkloadTemplate.objects.for_user(user).filter(slug=slug).first()
            if template is None:
                raise NothingVisible
        return {"team": _team_filter(self.request), "phase": phase, "owner": owner, "template": template}

    def _answer(self, workload: Workload, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=workload.pk)
        return Response(WorkloadDetailSerializer(fresh, context=self.get_serializer_context()).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = _parse(WorkloadLaunchSerializer, request)
        team = get_object_or_404(Team.objects.for_user(request.user), slug=data.pop("team"))
        workload = services.workload_launch(user=request.user, request=services.LaunchRequest(team=team, **data))
        return self._answer(workload, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: WorkloadDetailSerializer},
                   description="Its owner, the team's leads and platform admins stop a workload that is still active, "
                               "or delete what is left in the cluster of one that failed.")
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        return self._answer(services.workload_stop(user=request.user, workload=self.get_object()))

    @extend_schema(request=None, responses={201: WorkloadDetailSerializer},
                   description="Launches a new workload from the same template version with the same "
                               "flavor, resources and parameters; members of the team may relaunch.")
    @action(detail=True, methods=["post"])
    def relaunch(self, request: Request, pk: str | None = None) -> Response:
        workload = services.workload_relaunch(user=request.user, workload=self.get_object())
        return self._answer(workload, status.HTTP_201_CREATED)

    @extend_schema(request=ScaleSerializer, responses={200: WorkloadDetailSerializer},
                   description="Inference servers only: replicas within the template's bounds and the team's reach.")
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()  # another team's workload is 404 before its body is read
        replicas = _parse(ScaleSerializer, request)["replicas"]
        return self._answer(services.workload_scale(user=request.user, workload=workload, replicas=replicas))

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description=f"How many lines, 1 to {MAX_LOG_LINES}; 100 by default.")],
        responses={200: LogsSerializer}, description="The last log lines of the workload's newest pod, read from the cluster now.",
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        return Response(LogsSerializer(selectors.workload_logs(workload=workload, tail_lines=_tail(request))).data)

    @extend_schema(responses={200: WhyWaitingSerializer},
                   description="Why it has not started: Kueue's reason, the team's quota of the flavor, and the team's "
                               "workloads ahead of it in the queue.")
    @action(detail=True, methods=["get"], url_path="why-waiting")
    def why_waiting(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        answer = selectors.why_waiting(workload=workload)
        return Response(WhyWaitingSerializer({
            "phase": workload.phase, "reason": answer.reason, "position": answer.position,
            "ahead": [ahead.pk for ahead in answer.ahead], "usage": answer.usage,
        }).data)


def register(router: BaseRouter) -> None:
    router.register("templates", TemplateViewSet, basename="template")
    router.register("workloads", WorkloadViewSet, basename="workload")
