"""API endpoints for workload templates and workloads.

Each endpoint parses, calls one service or selector and serializes. A workload changes state only
through its actions (launch, stop, relaunch); who may do what is decided by the services, and
what a caller may see by the scoped querysets, so another team's workload answers 404. Lists are
filtered by the FilterSets in jobs/filters.py, the same ones the pages use.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from jobs import credentials, endpoint_keys, reclaim, selectors, services, volumes
from jobs.filters import TeamCredentialFilter, TeamVolumeFilter, TemplateFilter, WorkloadFilter
from jobs.models import GitSource, ImageRegistry, TeamCredential, TeamVolume, Workload, WorkloadTemplate
from jobs.rules import LOGS_REFUSAL
from jobs.serializers import (
    EndpointKeyCreateSerializer,
    EndpointKeyMadeSerializer,
    EndpointKeySerializer,
    GitSourceCreateSerializer,
    GitSourceSerializer,
    ImageRegistryCreateSerializer,
    ImageRegistrySerializer,
    LogsSerializer,
    NotebookTokenSerializer,
    ScaleSerializer,
    TeamCredentialCreateSerializer,
    TeamCredentialRotateSerializer,
    TeamCredentialSerializer,
    TeamVolumeCreateSerializer,
    TeamVolumeResizeSerializer,
    TeamVolumeSerializer,
    TemplateCreateSerializer,
    TemplatePublishedSerializer,
    TemplateReviseSerializer,
    TemplateSerializer,
    TemplateShareSerializer,
    WhyWaitingSerializer,
    WorkloadDetailSerializer,
    WorkloadLaunchSerializer,
    WorkloadSerializer,
)
from portal.adapters import parse, require_perm, signed_in_user, whole_number
from portal.errors import NotAllowed
from tenants.models import Team

MAX_LOG_LINES = 5000


# --- Templates ---------------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=TemplateCreateSerializer, responses={201: TemplatePublishedSerializer},
                         description="Platform admins create global templates; team leads create templates of their "
                         "team (with owner_team). Nothing is saved unless the cluster admits what a launch would "
                         "create, in a dry run (dryRun=All) in the namespace of check_in, as the template editor does; a "
                         "refusal is a 400 in the API server's words. A team template is checked in its own team; "
                         "left out, one of the portal's own is checked in the first provisioned team the caller sees "
                         "(checked_in says which, null when no team is in the cluster yet)."),
    partial_update=extend_schema(request=TemplateReviseSerializer, responses={200: TemplatePublishedSerializer},
                                 description="Publishes a new version with the given settings changed; workloads keep "
                                 "the version they were launched with. Platform admins, and leads of the owner team. "
                                 "Dry-run first, as on create: a version the API server refuses is not saved."),
)
class TemplateViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Templates are never deleted here: running workloads refer to their versions."""

    serializer_class = TemplateSerializer
    queryset = WorkloadTemplate.objects.none()
    filterset_class = TemplateFilter
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[WorkloadTemplate]:
        return selectors.templates_with_current_version(user=self.request.user)

    def get_object(self) -> WorkloadTemplate:
        """/api/templates/<id>/; an old /api/templates/<slug>/ still answers when only one template
        the caller can see has that slug. Another team's template is 404 by either."""
        reference = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        found = list(selectors.templates_named(templates=self.get_queryset(), reference=reference)[:2])
        if len(found) > 1:
            raise NotFound(f"Several templates you can see are named “{reference}”; name the one you mean by its id.")
        if not found:
            raise Http404
        self.check_object_permissions(self.request, found[0])
        return found[0]

    def _answer(self, template: WorkloadTemplate, code: int = status.HTTP_200_OK) -> Response:
        fresh = selectors.templates_with_current_version(user=self.request.user).get(pk=template.pk)
        return Response(self.get_serializer(fresh).data, status=code)

    def _published(self, saved: tuple[WorkloadTemplate, services.TemplatePreview], code: int) -> Response:
        template, preview = saved
        fresh = selectors.templates_with_current_version(user=self.request.user).get(pk=template.pk)
        context = {**self.get_serializer_context(), "checked_in": preview.team}
        return Response(TemplatePublishedSerializer(fresh, context=context).data, status=code)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        saved = services.template_save(user=signed_in_user(request), template=None,
                                       **parse(TemplateCreateSerializer, request))
        return self._published(saved, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        template = self.get_object()
        saved = services.template_save(user=signed_in_user(request), template=template,
                                       **parse(TemplateReviseSerializer, request))
        return self._published(saved, status.HTTP_200_OK)

    @extend_schema(request=TemplateShareSerializer, responses={200: TemplateSerializer},
                   summary="Choose who may use one of the portal's own templates",
                   description="Platform admins: every team (is_global) or only the teams listed. A team's own "
                               "template stays its team's.")
    @action(detail=True, methods=["post"])
    def share(self, request: Request, pk: str | None = None) -> Response:
        template = self.get_object()
        # Before the body is read: its team names are no one else's answer.
        require_perm(request.user, "jobs.create_global_template")
        services.template_share(user=signed_in_user(request), template=template, **parse(TemplateShareSerializer, request))
        return self._answer(template)


@extend_schema_view(
    list=extend_schema(description="The registries templates may pull images from, as platform admins keep them "
                                   "(PORTAL_IMAGE_REGISTRIES, set at deployment, is allowed too). Everyone signed in "
                                   "may read it, so a template's author knows what will be accepted."),
    create=extend_schema(request=ImageRegistryCreateSerializer, responses={201: ImageRegistrySerializer},
                         description="Platform admins: allow a registry host, or a path under it (nvcr.io/nvidia)."),
    destroy=extend_schema(description="Platform admins: templates using its images launch nothing more until their "
                                      "owners publish a version with an allowed image."),
)
class ImageRegistryViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ImageRegistrySerializer
    queryset = ImageRegistry.objects.select_related("created_by")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        registry = services.image_registry_add(user=signed_in_user(request), **parse(ImageRegistryCreateSerializer, request))
        return Response(self.get_serializer(registry).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.image_registry_remove(user=signed_in_user(request), registry=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    list=extend_schema(description="Where templates' git parameters may fetch code from, as platform admins keep "
                                   "them (PORTAL_GIT_SOURCES, set at deployment, is allowed too). Everyone signed in "
                                   "may read it, so a template's author knows what will be accepted."),
    create=extend_schema(request=GitSourceCreateSerializer, responses={201: GitSourceSerializer},
                         description="Platform admins: allow a git host, or a path under it (github.com/acme)."),
    destroy=extend_schema(description="Platform admins: launches fetching from it are refused from then on."),
)
class GitSourceViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = GitSourceSerializer
    queryset = GitSource.objects.select_related("created_by")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        source = services.git_source_add(user=signed_in_user(request), **parse(GitSourceCreateSerializer, request))
        return Response(self.get_serializer(source).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.git_source_remove(user=signed_in_user(request), source=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Workloads ---------------------------------------------------------------------------------


def _tail(request: Request) -> int:
    raw = request.query_params.get("tail", "100")
    lines = whole_number(raw)
    if lines is None or not 1 <= lines <= MAX_LOG_LINES:
        raise serializers.ValidationError({"tail": [f"tail is a number of lines from 1 to {MAX_LOG_LINES}, not “{raw}”."]})
    return lines


@extend_schema_view(
    retrieve=extend_schema(responses={200: WorkloadDetailSerializer}),
    create=extend_schema(request=WorkloadLaunchSerializer, responses={201: WorkloadDetailSerializer},
                         description="Launches a workload from a template for one of the caller's teams. It is recorded "
                                     "as submitting and then queued in the team's Kueue queue. A team has at most "
                                     "PORTAL_TEAM_MAX_WORKLOADS active workloads; a user launching faster than "
                                     "PORTAL_LAUNCH_RATE gets 429 with Retry-After (seconds) and a sentence."),
)
class WorkloadViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Workloads change state only through launch, stop and relaunch: no PUT, PATCH or DELETE."""

    serializer_class = WorkloadSerializer
    queryset = Workload.objects.none()
    filterset_class = WorkloadFilter

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return WorkloadSerializer if self.action == "list" else WorkloadDetailSerializer

    def get_queryset(self) -> QuerySet[Workload]:
        workloads = selectors.workloads_for_user(user=self.request.user).prefetch_related("accepted_flavors")
        return workloads if self.action == "list" else workloads.prefetch_related(
            "transitions", "intervals__flavor", "intervals__switches")

    def _answer(self, workload: Workload, code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=workload.pk)
        return Response(WorkloadDetailSerializer(fresh, context=self.get_serializer_context()).data, status=code)

    def _launched(self, workload: Workload) -> Response:
        launched = selectors.workload_launched(workload=workload)
        return Response(WorkloadDetailSerializer(launched, context=self.get_serializer_context()).data,
                        status=status.HTTP_201_CREATED)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse(WorkloadLaunchSerializer, request)
        team = get_object_or_404(Team.objects.for_user(request.user), slug=data.pop("team"))
        data["also_accept"] = tuple(data.get("also_accept") or ())
        workload = services.workload_launch(user=signed_in_user(request), request=services.LaunchRequest(team=team, **data))
        return self._launched(workload)

    @extend_schema(request=None, responses={200: WorkloadDetailSerializer},
                   description="Its owner, the team's leads and platform admins stop a workload that is still active, "
                               "or delete what is left in the cluster of one that failed.")
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        return self._answer(services.workload_stop(user=signed_in_user(request), workload=self.get_object()))

    @extend_schema(request=None, responses={200: WorkloadDetailSerializer},
                   description="A running workload warned as idle is not judged idle again for its policy's window "
                               "(once per warning, audited). Who may stop it may keep it.")
    @action(detail=True, methods=["post"], url_path="keep-running")
    def keep_running(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        reclaim.workload_keep_running(user=signed_in_user(request), workload=workload)
        return self._answer(workload)

    @extend_schema(request=None, responses={201: WorkloadDetailSerializer},
                   description="Launches a new workload from the same template version with the same "
                               "flavor, resources and parameters; members of the team may relaunch. It counts "
                               "against the same limits as a launch (429 with Retry-After past the rate).")
    @action(detail=True, methods=["post"])
    def relaunch(self, request: Request, pk: str | None = None) -> Response:
        workload = services.workload_relaunch(user=signed_in_user(request), workload=self.get_object())
        return self._launched(workload)

    @extend_schema(request=ScaleSerializer, responses={200: WorkloadDetailSerializer},
                   description="Inference servers only: replicas within the template's bounds and the team's reach.")
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()  # another team's workload is 404 before its body is read
        replicas = parse(ScaleSerializer, request)["replicas"]
        return self._answer(services.workload_scale(user=signed_in_user(request), workload=workload, replicas=replicas))

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description=f"How many lines, 1 to {MAX_LOG_LINES}; 100 by default."),
                    OpenApiParameter("pod", str, description="One of the workload's pods (see `pods`); the newest by default.")],
        responses={200: LogsSerializer},
        summary="Read a workload's log",
        description="The last log lines of one of the workload's pods (the newest unless `pod` names another), read "
                    "from the cluster now. The whole log is a download on the workload's page. The team's members and "
                    "platform admins only: finance gets 403.",
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        if not request.user.has_perm("jobs.read_workload_logs", workload):
            raise NotAllowed(LOGS_REFUSAL)
        logs = selectors.workload_logs(workload=workload, tail_lines=_tail(request),
                                       pod=request.query_params.get("pod", "").strip())
        return Response(LogsSerializer(logs).data)

    @extend_schema(methods=["GET"], request=None, responses={200: EndpointKeySerializer(many=True)},
                   description="The keys programs call this server with (an inference server), revoked ones too; "
                               "never the keys themselves. The team's members.")
    @extend_schema(methods=["POST"], request=EndpointKeyCreateSerializer, responses={201: EndpointKeyMadeSerializer},
                   description="A new key, in this answer only. Programs send it as `Authorization: Bearer <key>`; it "
                               "opens this server only. Audited.")
    @action(detail=True, methods=["get", "post"])
    def keys(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        if not request.user.has_perm("jobs.manage_endpoint_keys", workload):
            raise NotAllowed("Keys are for the members of the team whose server it is.")
        if request.method == "GET":
            rows = workload.endpoint_keys.select_related("created_by", "revoked_by")
            return Response(EndpointKeySerializer(rows, many=True).data)
        key, secret = endpoint_keys.key_create(actor=signed_in_user(request), workload=workload,
                                               **parse(EndpointKeyCreateSerializer, request))
        made = {**EndpointKeySerializer(key).data, "key": secret}  # the key, in this answer only
        return Response(made, status=status.HTTP_201_CREATED,
                        headers={"Cache-Control": "no-store"})

    @extend_schema(request=None, responses={200: EndpointKeySerializer},
                   description="Revokes the key: programs using it are refused from their next request. Audited.")
    @action(detail=True, methods=["post"], url_path=r"keys/(?P<key_id>[0-9]+)/revoke")
    def revoke_key(self, request: Request, pk: str | None = None, key_id: str | None = None) -> Response:
        workload = self.get_object()
        if not request.user.has_perm("jobs.manage_endpoint_keys", workload):
            raise NotAllowed("Keys are for the members of the team whose server it is.")
        key = get_object_or_404(workload.endpoint_keys, pk=key_id)
        return Response(EndpointKeySerializer(endpoint_keys.key_revoke(actor=signed_in_user(request), key=key)).data)

    @extend_schema(request=None, responses={200: NotebookTokenSerializer},
                   description="A notebook's owner only: its login token, in this answer and nowhere else (the portal "
                               "keeps only its hash). A read-only API token cannot ask for it.")
    @action(detail=True, methods=["post"], url_path="notebook-token")
    def notebook_token(self, request: Request, pk: str | None = None) -> Response:
        token = services.notebook_token_reveal(user=signed_in_user(request), workload=self.get_object())
        return Response(NotebookTokenSerializer({"notebook_token": token}).data, headers={"Cache-Control": "no-store"})

    @extend_schema(responses={200: WhyWaitingSerializer},
                   description="Why it has not started: Kueue's reason in words, the team's quota of the flavor, its "
                               "place in the queue (from Kueue's visibility API where the cluster serves it, else the "
                               "portal's estimate, and which), who uses the flavor now, an estimated start, and where "
                               "fair sharing between teams keeps it waiting, why, and where its owner's recent use orders it, "
                               "how.")
    @action(detail=True, methods=["get"], url_path="why-waiting")
    def why_waiting(self, request: Request, pk: str | None = None) -> Response:
        workload = self.get_object()
        answer = selectors.why_waiting(workload=workload)
        return Response(WhyWaitingSerializer({
            "phase": workload.phase, "reason": answer.reason, "position": answer.position,
            "position_source": answer.position_source, "ahead": [ahead.pk for ahead in answer.ahead],
            "usage": answer.usage, "holders": answer.holders, "estimated_start": answer.estimated_start,
            "estimate_basis": answer.estimate_basis, "fairness": answer.fairness, "order": answer.order,
        }).data)


# --- Data volumes ----------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(description="The data volumes made through the portal for the teams the caller sees. Each is a "
                                   "PersistentVolumeClaim of that name in its team's namespace; the team's volumes page "
                                   "also lists claims made outside the portal, which launches may mount too."),
    create=extend_schema(request=TeamVolumeCreateSerializer, responses={201: TeamVolumeSerializer},
                         description="Members and leads of the team, within its storage quota of the class."),
    partial_update=extend_schema(request=TeamVolumeResizeSerializer, responses={200: TeamVolumeSerializer},
                                 description="Grows it: a volume only grows, within the team's storage quota, where its "
                                             "storage class allows expansion."),
    destroy=extend_schema(description="Deletes it and its data; refused (409) while anything mounts it. Audited."),
)
class TeamVolumeViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin,
                        viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamVolumeSerializer
    queryset = TeamVolume.objects.none()
    filterset_class = TeamVolumeFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[TeamVolume]:
        return TeamVolume.objects.for_user(self.request.user).select_related("team", "created_by").order_by("team__slug", "name")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        volume = volumes.volume_create(actor=signed_in_user(request), **parse(TeamVolumeCreateSerializer, request))
        return Response(self.get_serializer(volume).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        volume = volumes.volume_resize(actor=signed_in_user(request), volume=self.get_object(),
                                       **parse(TeamVolumeResizeSerializer, request))
        return Response(self.get_serializer(volume).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        volumes.volume_delete(actor=signed_in_user(request), volume=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Credentials -----------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(description="The credentials kept for the teams the caller may launch for: names, kinds and "
                                   "hints, never values. Each is a Secret in its team's namespace."),
    create=extend_schema(request=TeamCredentialCreateSerializer, responses={201: TeamCredentialSerializer},
                         description="Members and leads of the team. The values are written into the Secret once and "
                                     "never returned; a refusal names the value it is about."),
    destroy=extend_schema(description="Deletes it and its Secret; refused (409) while an active workload mounts it. "
                                      "Audited."),
)
class TeamCredentialViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamCredentialSerializer
    queryset = TeamCredential.objects.none()
    filterset_class = TeamCredentialFilter

    def get_queryset(self) -> QuerySet[TeamCredential]:
        return (TeamCredential.objects.for_user(self.request.user).select_related("team", "created_by", "rotated_by")
                .order_by("team__slug", "name"))

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        given = parse(TeamCredentialCreateSerializer, request)
        credential = credentials.credential_create(actor=signed_in_user(request), team=given["team"], name=given["name"],
                                                   kind=given["kind"], values=given["values"])
        return Response(self.get_serializer(credential).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=TeamCredentialRotateSerializer, responses={200: TeamCredentialSerializer},
                   description="Writes new values over its old ones, in place: workloads mounting it get them (as "
                               "files within a minute, as variables at their next start). Audited.")
    @action(detail=True, methods=["post"])
    def rotate(self, request: Request, pk: str | None = None) -> Response:
        credential = credentials.credential_rotate(actor=signed_in_user(request), credential=self.get_object(),
                                                   values=parse(TeamCredentialRotateSerializer, request)["values"])
        return Response(self.get_serializer(credential).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        credentials.credential_delete(actor=signed_in_user(request), credential=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


def register(router: BaseRouter) -> None:
    router.register("templates", TemplateViewSet, basename="template")
    router.register("workloads", WorkloadViewSet, basename="workload")
    router.register("image-registries", ImageRegistryViewSet, basename="image-registry")
    router.register("git-sources", GitSourceViewSet, basename="git-source")
    router.register("volumes", TeamVolumeViewSet, basename="volume")
    router.register("credentials", TeamCredentialViewSet, basename="credential")
