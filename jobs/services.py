"""Every write about workloads and templates. Checks first, records, and only after commit
touches the cluster (through tasks)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from jobs import manifests, pricing
from jobs.models import Priority, Workload, WorkloadKind, WorkloadTemplate, WorkloadTemplateVersion, WorkloadTransition
from jobs.parameters import ParameterError, check_declarations, check_pod_count, render, validate_parameters
from portal import limits
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.models import User
from tenants import selectors as tenant_selectors
from tenants.manifests import tier_name
from tenants.models import Flavor, Team


def _require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


@dataclass(frozen=True)
class LaunchRequest:
    team: Team
    template: WorkloadTemplate
    flavor: Flavor
    units: int | None = None
    cpu: int | None = None
    memory_gib: int | None = None
    priority: str | None = None
    name: str = ""
    parameters: dict[str, Any] | None = None
    version: WorkloadTemplateVersion | None = None  # a relaunch keeps the version it copies


def record_transition(workload: Workload, phase: str, reason: str = "") -> None:
    """Moves the workload to a phase, keeping the timeline. A repeat of the same phase and
    reason is not a transition."""
    if workload.phase == phase and workload.reason == reason and workload.pk and workload.transitions.exists():
        return
    workload.phase, workload.reason = phase, reason
    now = timezone.now()
    if phase in Workload.FINAL_PHASES and workload.finished_at is None:
        workload.finished_at = now
    workload.save(update_fields=["phase", "reason", "finished_at"])
    WorkloadTransition.objects.create(workload=workload, phase=phase, reason=reason, at=now)


POD_COUNT_KINDS = (WorkloadKind.DISTRIBUTED, WorkloadKind.INFERENCE)


def _workers(version: WorkloadTemplateVersion, values: dict[str, Any]) -> int:
    """Pods of a distributed job, replicas of a server. A version saved before templates were
    checked for it may declare them as text or below 1: that refuses the launch, with a sentence
    for the member and the fix for the template's owner, instead of breaking it."""
    template = version.template
    if template.kind not in POD_COUNT_KINDS:
        return 1
    name = "workers" if "workers" in values else "replicas"
    count = values.get(name, 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DomainError(f"{template.name} declares {name} as “{count}”, not a whole number of at least 1; "
                          "ask its owner to fix the template.", field="parameters")
    return count


def check_launch(*, user: User, request: LaunchRequest) -> tuple[WorkloadTemplateVersion, dict[str, Any], dict[str, Any]]:
    """Everything a launch must satisfy, each refusal saying what to change. Returns the
    version, the parameter values and the resources to record."""
    team, template, flavor = request.team, request.template, request.flavor
    _require(user.has_perm("jobs.launch_workload", team))
    if not flavor.is_active:
        raise DomainError(f"{flavor.name} is retired: nothing new runs on it; choose another flavor.", field="flavor")
    if not WorkloadTemplate.objects.for_team(team).filter(pk=template.pk).exists():
        raise DomainError(f"The template “{template.name}” is not available to {team.slug}.", field="template")
    version = request.version or template.current
    if version.template_id != template.pk:
        raise DomainError(f"Version {version.number} is not a version of {template.name}.", field="template")
    if not version.flavors.filter(pk=flavor.pk).exists():
        allowed = ", ".join(version.flavors.values_list("name", flat=True)) or "none"
        raise DomainError(f"{template.name} cannot run on {flavor.name}; choose one of: {allowed}.", field="flavor")
    try:
        values = validate_parameters(declared=version.parameters, given=request.parameters or {})
    except ParameterError as error:
        raise DomainError(str(error), field="parameters") from None
    units = version.default_units if request.units is None else request.units
    if not 1 <= units <= version.max_units:
        raise DomainError(f"GPU units must be between 1 and {version.max_units} for {template.name}.", field="units")
    cpu = version.default_cpu if request.cpu is None else request.cpu
    if not 1 <= cpu <= version.max_cpu:
        raise DomainError(f"CPU cores must be between 1 and {version.max_cpu}.", field="cpu")
    memory = version.default_memory_gib if request.memory_gib is None else request.memory_gib
    if not 1 <= memory <= version.max_memory_gib:
        raise DomainError(f"Memory must be between 1 and {version.max_memory_gib} GiB.", field="memory_gib")
    priority = request.priority or version.default_priority
    if priority not in Priority.values:
        raise DomainError(f"Priority must be one of {', '.join(Priority.values)}.", field="priority")
    workers = _workers(version, values)
    total = units * workers
    ceiling = tenant_selectors.team_ceiling(team=team, flavor=flavor)
    if total > ceiling:
        if ceiling == 0:
            raise DomainError(
                f"{team.slug} has no {flavor.name} quota and may not borrow any: request quota first.", field="units"
            )
        raise DomainError(
            f"{total} {flavor.name} units is more than {team.slug} could ever get at once ({ceiling}); ask for fewer.",
            field="units",
        )
    limit = settings.PORTAL_TEAM_MAX_WORKLOADS
    if Workload.objects.filter(team=team).active().count() >= limit:
        raise DomainError(
            f"{team.slug} already has {limit} active workloads, the most a team may have at once; "
            "stop one before launching another.", field="team",
        )
    if team.synced_at is None:
        raise DomainError(f"The namespace of {team.slug} is not ready in the cluster yet; try again in a minute.", field="team")
    if refusal := pricing.launch_refusal(team=team):
        raise DomainError(refusal, field="team")
    return version, values, {"units": units, "cpu": cpu, "memory_gib": memory, "priority": priority, "workers": workers}


def launch_rate_check(*, user: User) -> None:
    """Counts a launch against the user's rate (PORTAL_LAUNCH_RATE), shared by the pages, the
    API and relaunch. Only launches that passed every other check count, so a form sent back
    with a mistake costs nothing."""
    count, seconds = settings.PORTAL_LAUNCH_RATE
    outcome = limits.hit(key=f"launch:{user.pk}", count=count, seconds=seconds)
    if not outcome.allowed:
        raise limits.RateLimited(
            f"You may launch {count} workloads {limits.per(seconds)} and have reached that; "
            f"try again in {limits.in_words(outcome.retry_after)}.",
            retry_after=outcome.retry_after,
        )


@transaction.atomic
def workload_launch(*, user: User, request: LaunchRequest, relaunch_of: Workload | None = None) -> Workload:
    version, values, resources = check_launch(user=user, request=request)
    launch_rate_check(user=user)
    name = (request.name or f"{request.template.slug}").strip()[:60]
    workload = Workload.objects.create(
        team=request.team, owner=user, template_version=version, name=name, parameters=values, flavor=request.flavor,
        notebook_token=secrets.token_urlsafe(24) if request.template.kind == WorkloadKind.NOTEBOOK else "",
        relaunch_of=relaunch_of, **resources,
    )
    WorkloadTransition.objects.create(
        workload=workload, phase=workload.phase, reason="Recorded; creating its objects in the cluster"
    )
    audit_record(actor=user, action="workload.launched", obj=workload, team_id=workload.team_id,
                 message=f"{user.username} launched {workload.name} (#{workload.pk}, {version}) on "
                 f"{workload.total_units} {workload.flavor.name} for {workload.team.slug}")
    from jobs import tasks

    transaction.on_commit(lambda: tasks.workload_submit.delay(workload.pk))
    return workload


@transaction.atomic
def workload_stop(*, user: User, workload: Workload) -> Workload:
    _require(user.has_perm("jobs.stop_workload", workload))
    """Deletes the workload's objects. A failed workload whose objects were once in the cluster
    may be stopped too: its pods can outlive the verdict and hold GPUs, and deleting what is
    left is harmless when nothing is. It stays failed, with the reason it failed."""
    locked = Workload.objects.select_for_update(of=("self",)).select_related("team").get(pk=workload.pk)
    leftovers = locked.phase == Workload.Phase.FAILED and locked.reached_cluster
    if not locked.is_active and not leftovers:
        raise StateConflict(f"{locked.name} has already {locked.get_phase_display().lower()}; there is nothing to stop.")
    if leftovers:
        audit_record(actor=user, action="workload.stopped", obj=locked, team_id=locked.team_id,
                     message=f"{user.username} deleted what was left in the cluster of failed {locked.name} "
                             f"(#{locked.pk}) of {locked.team.slug}")
    else:
        record_transition(locked, Workload.Phase.STOPPED, f"Stopped by {user.username}")
        audit_record(actor=user, action="workload.stopped", obj=locked, team_id=locked.team_id,
                     message=f"{user.username} stopped {locked.name} (#{locked.pk}) of {locked.team.slug}")
    from jobs import tasks

    transaction.on_commit(lambda: tasks.workload_teardown.delay(locked.pk))
    return locked


@transaction.atomic
def workload_scale(*, user: User, workload: Workload, replicas: int) -> Workload:
    """Inference servers grow or shrink within the template's bounds and the team's reach."""
    _require(user.has_perm("jobs.scale_workload", workload))
    locked = (
        Workload.objects.select_for_update(of=("self",))
        .select_related("team", "flavor", "template_version__template")
        .get(pk=workload.pk)
    )
    if locked.kind != WorkloadKind.INFERENCE:
        raise DomainError("Only inference servers have replicas to scale.", field="replicas")
    if not locked.is_active:
        raise StateConflict(f"{locked.name} has {locked.get_phase_display().lower()}; relaunch it instead.")
    declared = {spec["name"]: spec for spec in locked.template_version.parameters}
    spec = declared.get("workers") or declared.get("replicas") or {"min": 1, "max": 1}
    low, high = spec.get("min", 1), spec.get("max", 1)
    if not all(isinstance(bound, int) and not isinstance(bound, bool) for bound in (low, high)):
        raise DomainError(f"{locked.template_version.template.name} declares replicas without whole-number bounds; "
                          "ask its owner to fix the template.", field="replicas")
    if not low <= replicas <= high:
        raise DomainError(
            f"Replicas must be between {low} and {high} for {locked.template_version.template.name}.", field="replicas"
        )
    ceiling = tenant_selectors.team_ceiling(team=locked.team, flavor=locked.flavor)
    if locked.units * replicas > ceiling:
        raise DomainError(f"{replicas} replicas need {locked.units * replicas} {locked.flavor.name} units; "
                          f"{locked.team.slug} could get at most {ceiling}.", field="replicas")
    if replicas == locked.workers:
        return locked
    before = locked.workers
    locked.workers = replicas
    locked.parameters = {**locked.parameters, ("workers" if "workers" in declared else "replicas"): replicas}
    locked.save(update_fields=["workers", "parameters"])
    audit_record(actor=user, action="workload.scaled", obj=locked, team_id=locked.team_id,
                 message=f"{user.username} scaled {locked.name} (#{locked.pk}) from {before} to {replicas} replicas")
    from jobs import tasks

    transaction.on_commit(lambda: tasks.workload_apply.delay(locked.pk))
    return locked


def workload_relaunch(*, user: User, workload: Workload) -> Workload:
    version = workload.template_version
    return workload_launch(user=user, relaunch_of=workload, request=LaunchRequest(
        team=workload.team, template=version.template, flavor=workload.flavor, units=workload.units, cpu=workload.cpu,
        memory_gib=workload.memory_gib, priority=workload.priority, name=workload.name, parameters=workload.parameters,
        version=version,
    ))


def ingress_host(workload: Workload) -> str:
    domain = settings.PORTAL_INGRESS_DOMAIN
    return f"{workload.k8s_name}-{workload.team.slug}.{domain}" if domain else ""


def endpoint(workload: Workload) -> str:
    """Where an inference server or notebook answers."""
    host = ingress_host(workload)
    if host:
        return f"https://{host}/"
    return f"http://{workload.k8s_name}.{workload.team.namespace}.svc.cluster.local/"


def workload_spec(workload: Workload) -> manifests.WorkloadSpec:
    version = workload.template_version
    values = workload.parameters
    try:
        args = tuple(render(arg, values) for arg in version.args)
        env = tuple((key, render(str(value), values)) for key, value in sorted(version.env.items()))
    except ParameterError as error:
        raise DomainError(f"Template {version} is broken: {error}") from None
    return manifests.WorkloadSpec(
        workload_id=workload.pk, name=workload.k8s_name, namespace=workload.team.namespace, team=workload.team.slug,
        kind=manifests.workload_kind(version.template.kind), image=version.image, command=tuple(version.command),
        args=args, env=env,
        resource_name=workload.flavor.resource_name, units=workload.units, workers=workload.workers, cpu=workload.cpu,
        memory_gib=workload.memory_gib, priority=tier_name(workload.priority), max_runtime_seconds=version.max_runtime_seconds,
        port=version.port, storage_gib=version.storage_gib, notebook_token=workload.notebook_token,
        ingress_host=ingress_host(workload) if version.template.kind in (WorkloadKind.INFERENCE, WorkloadKind.NOTEBOOK) else "",
        annotations=tuple(sorted(settings.PORTAL_POD_ANNOTATIONS.items())),
    )


# --- Templates --------------------------------------------------------------------------------


TEMPLATE_VERSION_FIELDS = (
    "image", "command", "args", "env", "default_units", "max_units", "default_cpu", "max_cpu", "default_memory_gib",
    "max_memory_gib", "default_priority", "max_runtime_seconds", "storage_gib", "idle_minutes", "port", "parameters",
)


# What a PositiveIntegerField holds on every database the portal runs on (PostgreSQL's integer);
# a larger limit would be a database error, not a refusal.
LARGEST_LIMIT = 2**31 - 1
TEMPLATE_LIMIT_FIELDS = (
    "default_units", "max_units", "default_cpu", "max_cpu", "default_memory_gib", "max_memory_gib",
    "max_runtime_seconds", "storage_gib", "idle_minutes", "port",
)


def _check_version(fields: dict[str, Any], flavors: list[Flavor], *, kind: str) -> None:
    if not flavors:
        raise DomainError("Choose at least one GPU flavor the template may use.", field="flavors")
    if not str(fields.get("image", "")).strip():
        raise DomainError("A template needs a container image.", field="image")
    for field in TEMPLATE_LIMIT_FIELDS:
        value = fields.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LARGEST_LIMIT):
            raise DomainError(f"{field} must be a whole number from 0 to {LARGEST_LIMIT}, not “{value}”.", field=field)
    try:
        check_declarations(fields.get("parameters") or [])
        if kind in POD_COUNT_KINDS:
            check_pod_count(fields.get("parameters") or [])
        names = {spec["name"]: spec.get("default") for spec in fields.get("parameters") or []}
        for arg in fields.get("args") or []:
            render(str(arg), {k: v if v is not None else "" for k, v in names.items()})
    except ParameterError as error:
        raise DomainError(str(error), field="parameters") from None
    if fields.get("default_units", 1) > fields.get("max_units", 8):
        raise DomainError("The default GPU units cannot exceed the maximum.", field="default_units")


@transaction.atomic
def template_create(*, user: User, slug: str, name: str, kind: str, description: str = "", owner_team: Team | None = None,
                    flavors: list[Flavor], **fields: Any) -> WorkloadTemplate:
    if owner_team is None:
        _require(user.has_perm("jobs.create_global_template"))
    else:
        _require(user.has_perm("tenants.manage_members", owner_team))
    if kind not in WorkloadKind.values:
        raise DomainError(f"Kind must be one of {', '.join(WorkloadKind.values)}.", field="kind")
    _check_version(fields, flavors, kind=kind)
    if WorkloadTemplate.objects.filter(slug=slug).exists():
        raise DomainError(f"A template named “{slug}” exists already; choose another slug.", field="slug")
    template = WorkloadTemplate.objects.create(slug=slug, name=name, kind=kind, description=description,
                                               is_global=owner_team is None, owner_team=owner_team)
    version = WorkloadTemplateVersion.objects.create(template=template, number=1, created_by=user, **fields)
    version.flavors.set(flavors)
    audit_record(actor=user, action="template.created", obj=template, team_id=owner_team.pk if owner_team else None,
                 message=f"{user.username} created template {template.name} ({template.get_kind_display().lower()})")
    return template


@transaction.atomic
def template_revise(
    *, user: User, template: WorkloadTemplate, flavors: list[Flavor] | None = None, **changes: Any
) -> WorkloadTemplateVersion:
    """Editing makes a new version; workloads keep the version they were launched with."""
    _require(user.has_perm("jobs.manage_template", template))
    current = WorkloadTemplate.objects.select_for_update().get(pk=template.pk).current
    fields = {field: getattr(current, field) for field in TEMPLATE_VERSION_FIELDS}
    unknown = set(changes) - set(TEMPLATE_VERSION_FIELDS)
    if unknown:
        raise DomainError(f"These template fields do not exist: {', '.join(sorted(unknown))}.")
    fields.update(changes)
    flavor_list = list(flavors) if flavors is not None else list(current.flavors.all())
    _check_version(fields, flavor_list, kind=template.kind)
    version = WorkloadTemplateVersion.objects.create(template=template, number=current.number + 1, created_by=user, **fields)
    version.flavors.set(flavor_list)
    audit_record(actor=user, action="template.revised", obj=template,
                 team_id=template.owner_team_id, message=f"{user.username} published {version} of {template.name}")
    return version
