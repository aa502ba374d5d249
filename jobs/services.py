"""Every write about workloads and templates. Checks first, records, and only after commit
touches the cluster (through tasks)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from jobs import (
    access,
    credentials,
    idle_policy,
    kinds,
    manifests,
    notifications,
    person_limits,
    policy,
    pricing,
    rules,
    selectors,
)
from jobs.models import (
    GitSource,
    IdleDefaults,
    ImageRegistry,
    Priority,
    TeamCredential,
    Workload,
    WorkloadTemplate,
    WorkloadTemplateVersion,
    WorkloadTransition,
)
from jobs.parameters import (
    ChosenCredential,
    ParameterError,
    check_declarations,
    check_placeholders,
    check_pod_count,
    chosen_sources,
    chosen_work,
    render,
    validate_parameters,
)
from portal import limits
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.kube import KubeError, gateway
from portal.models import User
from portal.tasks import send_on_commit
from tenants import cluster_selectors, queueing
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services
from tenants.manifests import tier_name
from tenants.models import Flavor, GpuNode, Team


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
    # Other flavors the launch accepts beside `flavor` ("any whole 80 GB GPU"): of its resource
    # name, each allowed by the template. Kueue admits the workload on the first with room.
    also_accept: tuple[Flavor, ...] = ()

    @property
    def flavors(self) -> list[Flavor]:
        """Every flavor the launch accepts, the one it names first."""
        return [self.flavor, *(f for f in self.also_accept if f.pk != self.flavor.pk)]


def record_transition(workload: Workload, phase: str, reason: str = "", *, also_save: tuple[str, ...] = ()) -> None:
    """Moves the workload to a phase, keeping the timeline. A repeat of the same phase and
    reason is not a transition. `also_save` names other fields the caller set on the workload,
    written in the same UPDATE."""
    if workload.phase == phase and workload.reason == reason and workload.pk and workload.transitions.exists():
        if also_save:
            workload.save(update_fields=list(also_save))
        return
    entered = workload.phase != phase
    workload.phase, workload.reason = phase, reason
    now = timezone.now()
    if phase in Workload.FINAL_PHASES and workload.finished_at is None:
        workload.finished_at = now
    if phase in Workload.FINAL_PHASES and workload.waits_for_person_limit:
        workload.waits_for_person_limit = False  # stopped while it waited in the portal: it waits no more
        also_save = (*also_save, "waits_for_person_limit")
    workload.save(update_fields=["phase", "reason", "finished_at", *also_save])
    WorkloadTransition.objects.create(workload=workload, phase=phase, reason=reason, at=now)
    if entered and phase in Workload.FINAL_PHASES:
        person_limits.release_when_freed(workload)  # the owner's work waiting for their limit may go
    if entered and phase in notifications.PHASE_EVENTS:
        detail = reason if phase == Workload.Phase.FAILED else ""
        notifications.workload_event_notify(workload=workload, event=notifications.PHASE_EVENTS[phase], detail=detail)


UNSENT_REASON = ("Recorded, not sent to a worker yet: the portal's task queue did not answer. It is sent "
                 "as soon as the queue is back; nothing needs doing.")


def mark_unsent(workload_id: int) -> None:
    """What was asked for it (its submission, a change of its replicas, or its removal once
    stopped) never reached the broker: the next resubmit pass sends it again, whatever its age."""
    workload = Workload.objects.filter(pk=workload_id)
    workload.update(unsent_since=timezone.now())
    workload.filter(phase=Workload.Phase.SUBMITTING).update(reason=UNSENT_REASON)


def _workers(version: WorkloadTemplateVersion, values: dict[str, Any]) -> int:
    """Pods of a distributed job, replicas of a server. A version saved before templates were
    checked for it may declare them as text or below 1: that refuses the launch, with a sentence
    for the member and the fix for the template's owner, instead of breaking it."""
    template = version.template
    if not template.kind_facts.pod_count:
        return 1
    name = "workers" if "workers" in values else "replicas"
    count = values.get(name, 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DomainError(f"{template.name} declares {name} as “{count}”, not a whole number of at least 1; "
                          "ask its owner to fix the template.", field="parameters")
    return count


def pods_asked(*, version: WorkloadTemplateVersion, parameters: dict[str, Any] | None) -> int:
    """How many pods a launch asks for (workers, replicas), for the launch hint's totals even
    when the launch itself is refused: a count the refusal is about reads as one."""
    if not version.template.kind_facts.pod_count:
        return 1
    try:
        return _workers(version, validate_parameters(declared=version.parameters, given=parameters or {}))
    except (ParameterError, DomainError):
        return 1


def check_launch(*, user: User, request: LaunchRequest) -> tuple[WorkloadTemplateVersion, dict[str, Any], dict[str, Any]]:
    """Everything a launch must satisfy, each refusal saying what to change. Returns the
    version, the parameter values and the resources to record."""
    team = request.team
    _require(user.has_perm("jobs.launch_workload", team))
    version = _launch_version_checked(request)
    values = _launch_values_checked(version, request)
    units, cpu, memory, priority = _launch_resources_checked(user, version, request)
    workers = _workers(version, values)
    _check_team_room(team, request.flavors, units=units, workers=workers)
    if problem := nodes_problem(request.flavors):
        raise DomainError(problem, field="flavor")
    _check_runtime_classes(request.flavors)
    return version, values, {"units": units, "cpu": cpu, "memory_gib": memory, "priority": priority, "workers": workers}


def _launch_version_checked(request: LaunchRequest) -> WorkloadTemplateVersion:
    """The template version the launch runs: one the team may use, whose image is still allowed,
    on the flavor chosen (and those also accepted)."""
    team, template, flavor = request.team, request.template, request.flavor
    if not flavor.is_active:
        raise DomainError(f"{flavor.name} is retired: nothing new runs on it; choose another flavor.", field="flavor")
    if request.version is not None and request.version.template_id != template.pk:
        raise DomainError(f"Version {request.version.number} is not a version of {template.name}.", field="template")
    launchable = _launch_version(team=team, template=template, version=request.version, flavor=flavor)
    if launchable is None:
        raise DomainError(f"The template “{template.name}” is not available to {team.slug}.", field="template")
    version, runs_on_flavor = launchable
    if problem := kinds.refusal(template.kind):
        raise DomainError(f"{template.name} cannot be launched here: {problem}", field="template")
    image_refusal = image_no_longer_allowed(version)
    if image_refusal:
        raise DomainError(image_refusal, field="template")
    if not runs_on_flavor:
        allowed = ", ".join(version.flavors.values_list("name", flat=True)) or "none"
        raise DomainError(f"{template.name} cannot run on {flavor.name}; choose one of: {allowed}.", field="flavor")
    if request.also_accept:
        _check_alternatives(version, request)
    return version


def _launch_values_checked(version: WorkloadTemplateVersion, request: LaunchRequest) -> dict[str, Any]:
    """The parameter values, as the version declares them, with the image and sources they choose allowed."""
    try:
        values = validate_parameters(declared=version.parameters, given=request.parameters or {})
    except ParameterError as error:
        raise DomainError(str(error), field="parameters") from None
    chosen_image, _, _ = chosen_work(declared=version.parameters, values=values)
    if chosen_image is not None and (problem := policy.image_problem(chosen_image, selectors.image_allow_list())):
        raise DomainError(problem, field="parameters")
    _check_sources(request.team, version.parameters, values)
    return values


def _launch_resources_checked(user: User, version: WorkloadTemplateVersion,
                              request: LaunchRequest) -> tuple[int, int, int, str]:
    """GPU units, CPU cores, memory and priority: as asked, or the version's defaults, within its bounds."""
    name, flavor = request.template.name, request.flavor
    units = version.default_units if request.units is None else request.units
    if not 1 <= units <= version.max_units:
        raise DomainError(f"{unit_words(flavor)} must be between 1 and {version.max_units} for {name}.",
                          field="units")
    if flavor.is_cpu:
        cpu, memory = _cpu_unit_resources(flavor, units, request)
    else:
        cpu = version.default_cpu if request.cpu is None else request.cpu
        if not 1 <= cpu <= version.max_cpu:
            raise DomainError(f"CPU cores must be between 1 and {version.max_cpu}.", field="cpu")
        memory = version.default_memory_gib if request.memory_gib is None else request.memory_gib
        if not 1 <= memory <= version.max_memory_gib:
            raise DomainError(f"Memory must be between 1 and {version.max_memory_gib} GiB.", field="memory_gib")
    priority = request.priority or version.default_priority
    if priority not in Priority.values:
        raise DomainError(f"Priority must be one of {', '.join(Priority.values)}.", field="priority")
    priority_refusal = rules.priority_refusal(user, request.team, version, priority)
    if priority_refusal:
        raise DomainError(priority_refusal, field="priority")
    return units, cpu, memory, priority


def unit_words(flavor: Flavor) -> str:
    """What a launch's units are called on the flavor."""
    return "CPU units" if flavor.is_cpu else "GPU units"


def _cpu_unit_resources(flavor: Flavor, units: int, request: LaunchRequest) -> tuple[int, int]:
    """The cores and memory of `units` units of a CPU-only flavor: the unit decides them, so cores
    or memory asked for besides must be exactly what the units are."""
    cpu, memory = flavor.cpu_and_memory(units)
    for asked, given, field in ((request.cpu, cpu, "cpu"), (request.memory_gib, memory, "memory_gib")):
        if asked is not None and asked != given:
            raise DomainError(
                f"On {flavor.name} one unit is {flavor.resources_display}, so {units} unit{'s' if units != 1 else ''} "
                f"{'are' if units != 1 else 'is'} {cpu} cores and {memory} GiB; choose the units, not the "
                f"{'cores' if field == 'cpu' else 'memory'}.", field=field)
    return cpu, memory


def _check_team_room(team: Team, flavors: list[Flavor], *, units: int, workers: int) -> None:
    """The team has room for it: within its quota ceiling and its count of active workloads, its
    namespace ready, and nothing billing holds against it."""
    if flavors[0].is_cpu:
        _check_cpu_room(team, flavors[0], units=units * workers)
    else:
        _check_ceiling(team, flavors, units=units, workers=workers)
        if alone_too_big := person_limits.too_big(team=team, flavor=flavors[0], units=units, workers=workers):
            raise DomainError(alone_too_big, field="units")
    limit = settings.PORTAL_TEAM_MAX_WORKLOADS
    if Workload.objects.filter(team=team).active().count() >= limit:
        raise DomainError(
            f"{team.slug} already has {limit} active workloads, the most a team may have at once; "
            "stop one before launching another.", field="team",
        )
    if team.synced_at is None:
        raise DomainError(f"The namespace of {team.slug} is not ready in the cluster yet; try again in a minute.", field="team")
    if refusal := pricing.launch_refusal(team=team, flavors=flavors):
        raise DomainError(refusal, field="team")


def nodes_problem(flavors: list[Flavor]) -> str:
    """What the last node check found wrong with the nodes behind these flavors (tenants/nodes.py):
    a pod would run or be billed as something other than the flavor says. Read with the flavors."""
    problems = [flavor.nodes_problem for flavor in flavors if flavor.nodes_problem]
    if not problems:
        return ""
    return (f"{' '.join(problems)} Nothing can be launched on {', '.join(f.name for f in flavors if f.nodes_problem)} "
            "until a platform admin makes the flavor and its nodes agree.")


def _check_runtime_classes(flavors: list[Flavor]) -> None:
    """The cluster has the RuntimeClass each flavor's pods run with, read from the cluster now:
    otherwise the API server refuses the pods, and the launch would be a Job whose pods never
    appear. Last of the checks, so a launch refused for anything else costs no cluster read."""
    try:
        missing = cluster_selectors.missing_runtime_classes(flavors=flavors)
    except KubeError as error:
        naming = next(flavor for flavor in flavors if flavor.runtime_class_name)
        raise DomainError(cluster_selectors.runtime_class_unchecked_sentence(naming, error), field="flavor") from None
    if missing:
        raise DomainError(" ".join(missing.values()), field="flavor")


def _remember_accepted(workload: Workload, flavors: list[Flavor]) -> None:
    """Puts the flavors the launch accepts where a prefetch would (Django's prefetch cache), so the
    launch's answer does not read back what the launch just wrote."""
    known: Any = workload.accepted_flavors.none()
    known._result_cache, known._prefetch_done = sorted(flavors, key=lambda f: f.name), True
    cast(Any, workload)._prefetched_objects_cache = {"accepted_flavors": known}


def _check_alternatives(version: WorkloadTemplateVersion, request: LaunchRequest) -> None:
    """Each other flavor a launch accepts is active, allowed by the template and asks for what the
    named flavor's unit asks for: a pod's requests are written once, so Kueue can only choose among
    flavors they fit alike."""
    if request.also_accept and request.flavor.is_cpu:
        raise DomainError(f"{request.flavor.name} is CPU-only: no queue chooses among CPU flavors, so a launch on it runs "
                          "on the one flavor it names. Leave the others out.", field="also_accept")
    if request.also_accept and not queueing.backend().flavor_alternatives:
        raise DomainError(
            f"This site's queue, {queueing.backend().label}, runs a workload on the one flavor its launch names: it "
            f"cannot choose among several and charge the one it ran on. Choose {request.flavor.name} alone, or another "
            "flavor.", field="also_accept")
    allowed = {f.pk for f in version.flavors.all()}
    for other in request.also_accept:
        if not other.is_active:
            raise DomainError(f"{other.name} is retired: nothing new runs on it; leave it out.", field="also_accept")
        if other.pk not in allowed:
            raise DomainError(f"{request.template.name} cannot run on {other.name}; leave it out.", field="also_accept")
        if (other.unit_resources, other.device_class_name) != (request.flavor.unit_resources, request.flavor.device_class_name):
            raise DomainError(
                f"A unit of {other.name} asks for {other.resources_display}, and one of {request.flavor.name} for "
                f"{request.flavor.resources_display}; a launch may accept several flavors only where a unit asks for the "
                "same.", field="also_accept")
        if other.runtime_class_name != request.flavor.runtime_class_name:
            raise DomainError(
                f"{other.name} runs its pods with {_runtime_words(other)} and {request.flavor.name} with "
                f"{_runtime_words(request.flavor)}; a pod has one runtime class, so a launch may accept several "
                "flavors only where they share it.", field="also_accept")


def _runtime_words(flavor: Flavor) -> str:
    return f"the RuntimeClass “{flavor.runtime_class_name}”" if flavor.runtime_class_name else "the nodes' default runtime"


def _check_cpu_room(team: Team, flavor: Flavor, *, units: int) -> None:
    """A CPU-only flavor's units are not in the team's queue (Kueue leaves CPU alone), so the portal
    bounds them here: the team's active workloads on it and this launch within its guarantee. The
    team's row is locked for the count, so two launches at once cannot both take the last units."""
    with transaction.atomic():  # a launch's own transaction holds the lock until its workload is written
        Team.objects.select_for_update().filter(pk=team.pk).first()
        in_use = selectors.cpu_units_in_use(team=team, flavor=flavor)
    guaranteed = tenant_selectors.team_guarantees(team=team).get(flavor.pk, 0)
    if in_use + units <= guaranteed:
        return
    if not guaranteed:
        raise DomainError(f"{team.slug} has no {flavor.name} quota: request quota first.", field="units")
    raise DomainError(
        f"{team.slug} has {guaranteed} {flavor.name} units and uses {in_use}; {units} more would be "
        f"{in_use + units}. CPU-only units never wait in the queue: stop a workload on {flavor.name} or ask for "
        "fewer.", field="units")


def _check_ceiling(team: Team, flavors: list[Flavor], *, units: int, workers: int) -> None:
    """Refuses a launch no accepted flavor could ever admit at once (the team's guarantee plus what it may borrow)."""
    total = units * workers
    ceilings = {flavor.pk: tenant_selectors.team_ceiling(team=team, flavor=flavor) for flavor in flavors}
    if any(total <= ceiling for ceiling in ceilings.values()):
        return
    names = " or ".join(flavor.name for flavor in flavors)
    if not any(ceilings.values()):
        raise DomainError(f"{team.slug} has no {names} quota and may not borrow any: request quota first.", field="units")
    each = f" ({workers} pods × {units} units)" if workers > 1 else ""
    raise DomainError(
        f"{total} {names} units{each} is more than {team.slug} could ever get at once "
        f"({max(ceilings.values())}); ask for fewer.", field="units")


def _launch_version(
    *, team: Team, template: WorkloadTemplate, version: WorkloadTemplateVersion | None, flavor: Flavor
) -> tuple[WorkloadTemplateVersion, bool] | None:
    """The version a launch runs (the one given, else the template's current one) and whether it
    runs on the flavor; None when the template is not available to the team. One query, as the
    launch holds a web request while it checks."""
    versions = template.versions.filter(pk=version.pk) if version is not None else template.versions.order_by("-number")
    found = versions.filter(
        Exists(WorkloadTemplate.objects.for_team(team).filter(pk=OuterRef("template_id")))
    ).annotate(
        runs_on_flavor=Exists(WorkloadTemplateVersion.flavors.through.objects.filter(
            workloadtemplateversion_id=OuterRef("pk"), flavor_id=flavor.pk))
    ).first()
    if found is None:
        return None
    return found, found.runs_on_flavor


def _check_sources(team: Team, declared: list[dict[str, Any]], values: dict[str, Any]) -> None:
    """A chosen data volume must be a claim in the team's own namespace now (read from the
    cluster, not a list the form showed); a repository must be under the site's allowed sources."""
    try:
        problem = sources_problem(team, declared, values)
    except KubeError as error:
        raise DomainError(f"The cluster did not answer whether {team.slug} has the data volumes chosen; try again "
                          f"in a minute ({error}).", field="parameters") from None
    if problem:
        raise DomainError(problem, field="parameters")


def sources_problem(team: Team, declared: list[dict[str, Any]], values: dict[str, Any]) -> str:
    """Why the data volumes or repositories chosen may not be used (empty when they may). A
    KubeError reading the team's claims is raised: not knowing is not a refusal."""
    for spec in declared:
        name, value = spec["name"], values.get(spec["name"])
        if spec.get("type") == "volume" and value and not selectors.team_claim_exists(team=team, claim=value):
            return (f"{name}: {team.slug} has no data volume (PersistentVolumeClaim) named “{value}” in its namespace; "
                    "choose one of the team's volumes.")
        if spec.get("type") == "git" and value and not policy.git_url_allowed(value["url"], selectors.git_sources()):
            return _git_refusal(name, value["url"])
        if spec.get("type") == "credential" and value:
            found = credentials.chosen_secrets(team=team, names=[value]).get(value)
            if found is None or found.kind != spec.get("credential_kind"):
                label = TeamCredential.Kind(spec["credential_kind"]).label
                return (f"{name}: {team.slug} has no {label} named “{value}”; choose one of the team's credentials of "
                        "that kind (its credentials page keeps them).")
    return ""


def _git_refusal(name: str, url: str) -> str:
    allowed = ", ".join(selectors.git_sources()) or "none yet (the site sets PORTAL_GIT_SOURCES)"
    return f"{name}: the repository {url} is not from a source this portal fetches code from; allowed: {allowed}."


def image_no_longer_allowed(version: WorkloadTemplateVersion) -> str:
    """Why nothing may launch from a version whose image left the allow-list; empty when it may."""
    if policy.image_allowed(version.image, selectors.image_allow_list()):
        return ""
    return (f"{version.template.name} uses the image {version.image}, which is not from an allowed registry any more; "
            "ask its owner to publish a version with an allowed image.")


def template_withdrawn(workload: Workload) -> str:
    """Why nothing more may be created from the workload's template: withdrawn (it cannot be
    deleted while workloads name it) or no longer shared with the team. Empty when it may."""
    template = workload.template_version.template
    if WorkloadTemplate.objects.for_team(workload.team).filter(pk=template.pk).exists():
        return ""
    return (f"The template “{template.name}” is no longer available to {workload.team.slug}; "
            "launch it again from another template.")


def submission_refusal(workload: Workload) -> str:
    """Why a recorded workload may not be created in the cluster after all, checked again when a
    lost submission is sent again: its template may have been withdrawn, its owner may have lost
    the role its tier needs, its image may have left the allow-list, its data volume may have been
    deleted, its repository's source withdrawn, its kind no longer runnable on the site's queue
    backend (switched since), its flavor's nodes found to disagree with it or
    its RuntimeClass removed from the cluster. Empty when it may go. A KubeError reading the team's
    claims or the RuntimeClasses is raised, so the submission is retried rather than failed."""
    version = workload.template_version
    flavors = workload_flavors(workload)
    return (template_withdrawn(workload)
            or kinds.refusal(version.template.kind)
            or rules.priority_refusal(workload.owner, workload.team, version, workload.priority)
            or image_no_longer_allowed(version)
            or sources_problem(workload.team, version.parameters, workload.parameters)
            or nodes_problem(flavors)
            or _runtime_class_problem(flavors))


def _runtime_class_problem(flavors: list[Flavor]) -> str:
    """Flavors accepted together whose runtime classes an admin has since made differ (a pod has
    one), or a RuntimeClass the cluster lacks; empty when the pods may be made."""
    if len({flavor.runtime_class_name for flavor in flavors}) > 1:
        return (f"{', '.join(flavor.name for flavor in flavors)} no longer share a runtime class ("
                f"{', '.join(_runtime_words(flavor) for flavor in flavors)}), and a pod has one; relaunch it on one of them.")
    return " ".join(cluster_selectors.missing_runtime_classes(flavors=flavors).values())


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
        relaunch_of=relaunch_of, queue_name=queueing.backend().person_queue(user.pk), **resources,
    )
    if len(request.flavors) > 1:
        workload.accepted_flavors.set(request.flavors)
    _remember_accepted(workload, request.flavors if len(request.flavors) > 1 else [])
    if request.template.kind_facts.has_token:
        # Derived from the key and the row, so only the hash is stored (see jobs/access.py).
        workload.notebook_token_sha256 = access.notebook_token_digest(access.notebook_token(workload))
        workload.save(update_fields=["notebook_token_sha256"])
    WorkloadTransition.objects.create(
        workload=workload, phase=workload.phase, reason="Recorded; creating its objects in the cluster"
    )
    audit_record(actor=user, action="workload.launched", obj=workload, team_id=workload.team_id,
                 message=f"{user.username} launched {workload.name} (#{workload.pk}, {version}) on "
                 f"{workload.total_units} {' or '.join(f.name for f in request.flavors)} for {workload.team.slug}")
    if _waits_for_person_limit(workload):
        return workload
    send_on_commit("jobs.tasks.workload_submit", workload.pk, unsent=lambda: mark_unsent(workload.pk))
    return workload


def _waits_for_person_limit(workload: Workload) -> bool:
    """Queues the launch in the portal when its owner's workloads hold the team's per-person GPU
    limit (jobs.person_limits); under the team's lock, so two launches at once count each other."""
    if (workload.team.person_gpu_limit is None and workload.team.person_share_percent is None) or workload.flavor.is_cpu:
        return False
    team = Team.objects.select_for_update().get(pk=workload.team_id)
    words = person_limits.must_wait(team=team, owner=workload.owner, flavor=workload.flavor, units=workload.units,
                                    workers=workload.workers, launching=workload)
    if not words:
        return False
    workload.waits_for_person_limit = True
    record_transition(workload, Workload.Phase.QUEUED, words, also_save=("waits_for_person_limit",))
    return True


PERSON_LIMIT_RELEASED = "There is room under your per-person limit now: creating its objects in the cluster"


@transaction.atomic
def person_limit_release(*, team_id: int, owner_id: int | None = None) -> list[int] | None:
    """Sends the workloads waiting for the per-person limit that now fit (of one owner, or of
    everyone in the team), each owner's oldest first, stopping at the first that does not fit so
    none overtakes an older one; under the team's lock, as launches are recorded. None when the
    team is gone."""
    team = Team.objects.select_for_update().filter(pk=team_id).first()
    if team is None:
        return None
    waiting = (Workload.objects.select_for_update(of=("self",)).select_related("flavor")
               .filter(team_id=team_id, waits_for_person_limit=True, phase=Workload.Phase.QUEUED).order_by("created_at", "pk"))
    if owner_id is not None:
        waiting = waiting.filter(owner_id=owner_id)
    cap = tenant_selectors.person_gpu_cap(team=team)
    held = person_limits.held_by_owner(team=team)  # every owner's at once: one query
    blocked: set[int] = set()
    released: list[int] = []
    for workload in waiting:
        if workload.owner_id in blocked:
            continue
        held.setdefault(workload.owner_id, Fraction(0))
        asked = person_limits.gpus(flavor=workload.flavor, units=workload.units, workers=workload.workers)
        if cap is not None and held[workload.owner_id] + asked > cap.gpus:
            blocked.add(workload.owner_id)
            continue
        held[workload.owner_id] += asked
        workload.waits_for_person_limit = False
        record_transition(workload, Workload.Phase.SUBMITTING, PERSON_LIMIT_RELEASED, also_save=("waits_for_person_limit",))
        send_on_commit("jobs.tasks.workload_submit", workload.pk, unsent=partial(mark_unsent, workload.pk))
        released.append(workload.pk)
    return released


@transaction.atomic
def workload_stop(*, user: User, workload: Workload) -> Workload:
    """Deletes the workload's objects. A failed workload whose objects were once in the cluster
    may be stopped too: its pods can outlive the verdict and hold GPUs, and deleting what is
    left is harmless when nothing is. It stays failed, with the reason it failed."""
    _require(user.has_perm("jobs.stop_workload", workload))
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
    send_on_commit("jobs.tasks.workload_teardown", locked.pk, unsent=lambda: mark_unsent(locked.pk))
    return locked


def node_drain(*, actor: User, node: GpuNode) -> list[Workload]:
    """Drains a node of the portal's work: cordons it (nothing new starts there), then stops each
    workload with a pod running on it, as a person's stop does (audited, torn down by the worker,
    its run intervals closed when its pods are gone). Pods the portal does not own are left to
    the site (`kubectl drain`). Returns the workloads stopped."""
    _require(actor.has_perm("tenants.manage_flavors"))
    tenant_services.node_cordon(actor=actor, node=node, cordoned=True)
    on_node = [running.pk for running in selectors.workloads_on_nodes([node.name]).get(node.name, [])]
    stopped = []
    for workload in Workload.objects.filter(pk__in=on_node).order_by("pk"):
        try:
            stopped.append(workload_stop(user=actor, workload=workload))
        except StateConflict:  # it ended between the read and the stop
            continue
    audit_record(actor=actor, action="node.drained", obj=node,
                 data={"stopped": [workload.pk for workload in stopped]},
                 message=f"{actor.username} drained node {node.name}: stopped "
                         f"{', '.join(f'{w.name} (#{w.pk}) of {w.team.slug}' for w in stopped) or 'nothing of the portal'}")
    return stopped


@transaction.atomic
def workload_scale(*, user: User, workload: Workload, replicas: int) -> Workload:
    """Inference servers grow or shrink within the template's bounds and the team's reach."""
    _require(user.has_perm("jobs.scale_workload", workload))
    locked = (
        Workload.objects.select_for_update(of=("self",))
        .select_related("team", "flavor", "template_version__template")
        .get(pk=workload.pk)
    )
    if not locked.kind_facts.scalable:
        raise DomainError(f"Only {kinds.words(kinds.names(scalable=True), nouns=True)} have replicas to scale.", field="replicas")
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
    if alone_too_big := person_limits.too_big(team=locked.team, flavor=locked.flavor, units=locked.units, workers=replicas,
                                              asking=f"{replicas} replicas ask"):
        raise DomainError(alone_too_big, field="replicas")
    if replicas > locked.workers and not locked.waits_for_person_limit and (
            refusal := person_limits.scale_refusal(workload=locked, replicas=replicas)):
        raise DomainError(refusal, field="replicas")
    before = locked.workers
    locked.workers = replicas
    locked.parameters = {**locked.parameters, ("workers" if "workers" in declared else "replicas"): replicas}
    locked.save(update_fields=["workers", "parameters"])
    audit_record(actor=user, action="workload.scaled", obj=locked, team_id=locked.team_id,
                 message=f"{user.username} scaled {locked.name} (#{locked.pk}) from {before} to {replicas} replicas")
    send_on_commit("jobs.tasks.workload_apply", locked.pk, unsent=lambda: mark_unsent(locked.pk))
    return locked


def workload_relaunch(*, user: User, workload: Workload) -> Workload:
    version = workload.template_version
    return workload_launch(user=user, relaunch_of=workload, request=LaunchRequest(
        team=workload.team, template=version.template, flavor=workload.flavor, units=workload.units, cpu=workload.cpu,
        memory_gib=workload.memory_gib, priority=workload.priority, name=workload.name, parameters=workload.parameters,
        version=version, also_accept=tuple(workload_flavors(workload)),
    ))


def ingress_host(workload: Workload) -> str:
    domain = settings.PORTAL_INGRESS_DOMAIN
    return f"{workload.k8s_name}-{workload.team.slug}.{domain}" if domain and workload.kind_facts.serves_http else ""


def endpoint_workload(host: str) -> int | None:
    """The workload whose endpoint answers at `host` (`wl-<id>-<team>.<domain>`, a port allowed),
    or None: the host must be exactly the one the portal gives it."""
    domain = settings.PORTAL_INGRESS_DOMAIN
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    found = re.fullmatch(rf"wl-([0-9]{{1,18}})-[a-z0-9-]+\.{re.escape(domain)}", name.lower()) if domain else None
    if found is None:
        return None
    workload = Workload.objects.select_related("team", "template_version__template").filter(pk=int(found[1])).first()
    return workload.pk if workload is not None and ingress_host(workload) == name.lower() else None


def ingress_tls() -> bool:
    if settings.PORTAL_ENDPOINT_ROUTES == "gateway":
        return settings.PORTAL_GATEWAY_TLS
    return bool(settings.PORTAL_INGRESS_TLS_SECRET or settings.PORTAL_INGRESS_CLUSTER_ISSUER)


def ingress_spec(workload: Workload) -> manifests.IngressSpec | None:
    """The workload's Ingress or HTTPRoute, with the portal's gate in front and TLS as the site
    configured it."""
    host = ingress_host(workload)
    if not host:
        return None
    if settings.PORTAL_ENDPOINT_ROUTES == "gateway":
        return manifests.IngressSpec(host=host, gateway=settings.PORTAL_GATEWAY,
                                     auth_service=settings.PORTAL_GATEWAY_AUTH_SERVICE)
    return manifests.IngressSpec(
        host=host, class_name=settings.PORTAL_INGRESS_CLASS, tls_secret=settings.PORTAL_INGRESS_TLS_SECRET,
        cluster_issuer=settings.PORTAL_INGRESS_CLUSTER_ISSUER,
        auth_url=f"{settings.PORTAL_INGRESS_AUTH_URL}/auth/workloads/{workload.pk}/",
        signin_url=f"{settings.SITE_URL}/workloads/{workload.pk}/open/?rd=$escaped_request_uri",
    )


def port_forward_command(workload: Workload) -> str:
    """Without an Ingress no browser reaches a workload's in-cluster address; this line forwards
    a local port to its Service through the API server (it needs the right to port-forward in
    the team's namespace, which the members' `view` binding does not give)."""
    local = workload.kind_facts.local_port
    return f"kubectl -n {workload.team.namespace} port-forward svc/{workload.k8s_name} {local}:80"


def endpoint(workload: Workload) -> str:
    """Where an inference server or notebook answers: https only when its Ingress has TLS."""
    host = ingress_host(workload)
    if host:
        return f"{'https' if ingress_tls() else 'http'}://{host}/"
    return f"http://{workload.k8s_name}.{workload.team.namespace}.svc.cluster.local/"


@transaction.atomic
def notebook_token_reveal(*, user: User, workload: Workload) -> str:
    """Hands a notebook's owner its token, in the answer to a POST and nowhere else (no page, no
    URL, no list), and writes down that it was handed over."""
    _require(user.has_perm("jobs.reveal_notebook_token", workload))
    if not workload.is_active:
        raise StateConflict(f"{workload.name} has {workload.get_phase_display().lower()}; its token opens nothing.")
    token = access.notebook_token(workload)
    if not workload.notebook_token_sha256 or access.notebook_token_digest(token) != workload.notebook_token_sha256:
        raise StateConflict(f"{workload.name} was started before notebook tokens moved into Kubernetes Secrets, so "
                            "the portal cannot hand its token over; relaunch it.")
    audit_record(actor=user, action="workload.notebook_token_revealed", obj=workload, team_id=workload.team_id,
                 message=f"{user.username} was handed the token of notebook {workload.name} (#{workload.pk})")
    return token


def workload_spec(workload: Workload) -> manifests.WorkloadSpec:
    version = workload.template_version
    values = workload.parameters
    try:
        image, extra_args, extra_env = chosen_work(declared=version.parameters, values=values)
        sources = chosen_sources(declared=version.parameters, values=values)
        args = (*(render(arg, values) for arg in version.args), *extra_args)
        variables = {key: render(str(value), values) for key, value in version.env.items()}
        env = tuple(sorted({**variables, **extra_env}.items()))
    except ParameterError as error:
        raise DomainError(f"Template {version} is broken: {error}") from None
    return manifests.WorkloadSpec(
        workload_id=workload.pk, name=workload.k8s_name, namespace=workload.team.namespace, team=workload.team.slug,
        kind=kinds.get(version.template.kind).name, image=image or version.image, command=tuple(version.command),
        args=tuple(args), env=env,
        gpu=tuple(workload.flavor.pod_requests(workload.units).items()),
        claim=(workload.flavor.device_class_name, workload.units) if workload.flavor.device_class_name else None,
        workers=workload.workers, cpu=workload.cpu,
        memory_gib=workload.memory_gib, priority=tier_name(workload.priority), max_runtime_seconds=version.max_runtime_seconds,
        port=version.port, storage_gib=version.storage_gib,
        notebook_token=access.notebook_token(workload) if version.template.kind_facts.has_token else "",
        ingress=ingress_spec(workload),
        annotations=tuple(sorted(settings.PORTAL_POD_ANNOTATIONS.items())),
        volumes=sources.volumes, repositories=sources.repositories,
        credentials=_credential_mounts(workload.team, sources.credentials),
        git_image=settings.PORTAL_GIT_IMAGE if sources.repositories else "",
        placements=tuple(placement(flavor) for flavor in workload_flavors(workload)),
        queue=tuple(queueing.backend().workload_labels(priority=tier_name(workload.priority),
                                                       queue=workload.queue_name).items()),
        team_queue=workload.team.cluster_queue, flavor=workload.flavor.slug,
        indexed_pod_name=queueing.backend().indexed_pod_name,
    )


def _credential_mounts(team: Team, chosen: tuple[ChosenCredential, ...]) -> tuple[manifests.CredentialMount, ...]:
    """The Secrets of the credentials a launch chose. One deleted meanwhile stops the apply in
    words (a credential in use by an active workload cannot be deleted, so this is a race lost)."""
    if not chosen:
        return ()
    found = credentials.chosen_secrets(team=team, names=[choice.name for choice in chosen])
    missing = [choice.name for choice in chosen if choice.name not in found]
    if missing:
        raise DomainError(f"{team.slug} no longer has the credential {', '.join(missing)}; relaunch with another.")
    return tuple(manifests.CredentialMount(secret_name=found[choice.name].secret_name, kind=choice.kind,
                                           mount_path=choice.mount_path) for choice in chosen)


def placement(flavor: Flavor) -> manifests.Placement:
    return manifests.Placement(node_labels=tuple(sorted(flavor.node_labels.items())),
                               tolerations=tuple(dict(t) for t in flavor.tolerations),
                               runtime_class=flavor.runtime_class_name)


def workload_flavors(workload: Workload) -> list[Flavor]:
    """The flavors a workload may run on: the one its launch named, or every one it accepted (in
    the catalog's order, so its manifests are the same on every apply)."""
    accepted = list(workload.accepted_flavors.all())
    return sorted(accepted, key=lambda f: (f.name, f.pk)) if accepted else [workload.flavor]


# --- Templates --------------------------------------------------------------------------------


TEMPLATE_VERSION_FIELDS = (
    "image", "command", "args", "env", "default_units", "max_units", "default_cpu", "max_cpu", "default_memory_gib",
    "max_memory_gib", "default_priority", "allowed_priorities", "max_runtime_seconds", "storage_gib", "idle_minutes", "port",
    "parameters", "idle_threshold_percent", "idle_window_minutes", "idle_action", "idle_grace_minutes",
)


def _argv(fields: dict[str, Any], name: str) -> None:
    """Command and args are argument lists handed to the container as they are: no shell is put
    in front of them, and a parameter fills a whole argument."""
    value = fields.get(name)
    if value is not None and (not isinstance(value, list) or not all(isinstance(arg, str) for arg in value)):
        raise DomainError(f"The {name} must be a list of arguments (text), e.g. [\"python\", \"train.py\"].", field=name)


def _check_version(fields: dict[str, Any], flavors: list[Flavor], *, kind: str) -> None:
    """Everything a template version must satisfy before it is saved, each refusal naming its field."""
    pod_count = kinds.get(kind).pod_count
    if problem := kinds.refusal(kind):
        raise DomainError(problem, field="kind")
    if not flavors:
        raise DomainError("Choose at least one flavor the template may use.", field="flavors")
    if cpu_only := [f for f in flavors if f.is_cpu]:
        if len(cpu_only) < len(flavors):
            raise DomainError(f"{', '.join(f.name for f in cpu_only)} {'is' if len(cpu_only) == 1 else 'are'} CPU-only "
                              "and the others GPU flavors: a template runs on GPUs or on CPUs alone.", field="flavors")
        if not kinds.get(kind).runs_on_cpu:
            raise DomainError(f"{kinds.get(kind).plural[:1].upper()}{kinds.get(kind).plural[1:]} need a GPU; "
                              f"CPU-only flavors run {kinds.words(kinds.names(runs_on_cpu=True))}.", field="flavors")
    _check_container(fields)
    _check_limits(fields)
    _check_priorities(fields)
    idle_problems = idle_policy.version_problems(fields, kind=kind, bounds=IdleDefaults.current())
    if idle_problems:
        field, problem = next(iter(idle_problems.items()))
        raise DomainError(problem, field=field)
    _check_declared_parameters(fields, pod_count=pod_count)


def _check_container(fields: dict[str, Any]) -> None:
    """An allowed image, argument lists, and environment variables a template may set."""
    problem = policy.image_problem(str(fields.get("image", "")), selectors.image_allow_list())
    if problem:
        raise DomainError(problem, field="image")
    _argv(fields, "command")
    _argv(fields, "args")
    env = fields.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise DomainError("The env must map names to text values.", field="env")
    for name in env:
        problem = policy.env_problem(str(name))
        if problem:
            raise DomainError(problem, field="env")


def _check_limits(fields: dict[str, Any]) -> None:
    """Each limit within the platform's, and each default within its maximum."""
    for field in policy.LIMITS:
        value = fields.get(field)
        problem = policy.limit_problem(field, value) if value is not None else None
        if problem:
            raise DomainError(problem, field=field)
    defaults = WorkloadTemplateVersion(**{k: v for k, v in fields.items() if k in policy.LIMITS})
    for low, high, words in (("default_units", "max_units", "GPU units"), ("default_cpu", "max_cpu", "CPU cores"),
                             ("default_memory_gib", "max_memory_gib", "memory")):
        if getattr(defaults, low) > getattr(defaults, high):
            raise DomainError(f"The default {words} cannot exceed the maximum.", field=low)


def _check_declared_parameters(fields: dict[str, Any], *, pod_count: bool) -> None:
    """The parameters' declarations, the placeholders that use them, their git defaults from
    allowed sources, and no more pods than a workload may have."""
    try:
        check_declarations(fields.get("parameters") or [])
        if pod_count:
            check_pod_count(fields.get("parameters") or [])
    except ParameterError as error:
        raise DomainError(str(error), field="parameters") from None
    for field, texts in (("args", fields.get("args") or []), ("env", (fields.get("env") or {}).values())):
        try:
            check_placeholders(declared=fields.get("parameters") or [], texts=texts)
        except ParameterError as error:
            raise DomainError(str(error), field=field) from None
    for spec in fields.get("parameters") or []:
        default = spec.get("default")
        if spec["type"] == "git" and isinstance(default, dict) and default.get("url") and not policy.git_url_allowed(
                default["url"], selectors.git_sources()):
            raise DomainError(_git_refusal(spec["name"], default["url"]), field="parameters")
    if pod_count:
        for spec in fields.get("parameters") or []:
            if spec["name"] in ("workers", "replicas") and spec["max"] > policy.MAX_POD_COUNT:
                raise DomainError(f"{spec['name']} may be at most {policy.MAX_POD_COUNT}: it counts pods.",
                                  field="parameters")


def _check_priorities(fields: dict[str, Any]) -> None:
    default = fields.get("default_priority") or Priority.NORMAL
    allowed = fields.get("allowed_priorities")
    allowed = list(rules.MEMBER_PRIORITIES) if allowed is None else allowed
    if not isinstance(allowed, list) or not allowed or any(tier not in Priority.values for tier in allowed):
        raise DomainError(f"Allowed priorities must be one or more of {', '.join(Priority.values)}.",
                          field="allowed_priorities")
    if len(set(allowed)) != len(allowed):
        raise DomainError("Allowed priorities name a tier twice.", field="allowed_priorities")
    if default not in allowed:
        raise DomainError(f"The default priority {default} must be one the template allows ({', '.join(allowed)}): "
                          "members launch at it.", field="default_priority")


TEMPLATE_SLUG = re.compile(r"(?=.*[A-Za-z_])[-A-Za-z0-9_]{1,40}")


@transaction.atomic
def template_create(*, user: User, slug: str, name: str, kind: str, description: str = "", owner_team: Team | None = None,
                    flavors: list[Flavor], **fields: Any) -> WorkloadTemplate:
    if owner_team is None:
        _require(user.has_perm("jobs.create_global_template"))
    else:
        _require(user.has_perm("tenants.manage_members", owner_team))
    if not kinds.known(kind):
        raise DomainError(f"Kind must be one of {', '.join(kinds.KINDS)}.", field="kind")
    _check_version(fields, flavors, kind=kind)
    if not TEMPLATE_SLUG.fullmatch(slug):
        raise DomainError(f"“{slug}” is not a slug: up to 40 letters, digits, hyphens and underscores, at least one "
                          "of them a letter (a number names a template by its id).", field="slug")
    # Only among the templates of the same owner: another team's slugs are theirs, and saying a
    # name is taken there would tell this team what the other one has.
    where = f"{owner_team.slug} already has" if owner_team else "The portal already has"
    taken = DomainError(f"{where} a template named “{slug}”; choose another slug.", field="slug")
    if WorkloadTemplate.objects.filter(slug=slug, owner_team=owner_team).exists():
        raise taken
    try:
        with transaction.atomic():
            template = WorkloadTemplate.objects.create(slug=slug, name=name, kind=kind, description=description,
                                                       is_global=owner_team is None, owner_team=owner_team)
    except IntegrityError:
        raise taken from None  # another request took the slug between the check and the insert
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


# --- The image allow-list -------------------------------------------------------------------------


@transaction.atomic
def image_registry_add(*, user: User, prefix: str, note: str = "") -> ImageRegistry:
    """Allows templates to use images from a registry (host), or from a path under it."""
    _require(user.has_perm("jobs.manage_image_registries"))
    entry = policy.registry_entry(prefix)
    if entry is None:
        raise DomainError(f"“{prefix[:200]}” is not a registry: write its host, optionally with a path, "
                          "e.g. nvcr.io/nvidia.", field="prefix")
    if ImageRegistry.objects.filter(prefix=entry).exists():
        raise DomainError(f"{entry} is on the allow-list already.", field="prefix")
    registry = ImageRegistry.objects.create(prefix=entry, note=note[:200], created_by=user)
    audit_record(actor=user, action="image_registry.added", obj=registry,
                 message=f"{user.username} allowed images from {entry}")
    return registry


@transaction.atomic
def image_registry_remove(*, user: User, registry: ImageRegistry) -> None:
    """Takes a registry off the allow-list: templates using its images launch nothing more until
    their owners publish a version with an allowed image."""
    _require(user.has_perm("jobs.manage_image_registries"))
    audit_record(actor=user, action="image_registry.removed", obj=registry,
                 message=f"{user.username} no longer allows images from {registry.prefix}")
    registry.delete()


# --- The git allow-list ---------------------------------------------------------------------------


@transaction.atomic
def git_source_add(*, user: User, prefix: str, note: str = "") -> GitSource:
    """Allows templates' git parameters to fetch from a host, or from a path under it."""
    _require(user.has_perm("jobs.manage_git_sources"))
    entry = policy.git_source_entry(prefix)
    if entry is None:
        raise DomainError(f"“{prefix[:200]}” is not a git source: write its host, optionally with a path, "
                          "e.g. github.com/acme.", field="prefix")
    if GitSource.objects.filter(prefix=entry).exists():
        raise DomainError(f"{entry} is on the allow-list already.", field="prefix")
    source = GitSource.objects.create(prefix=entry, note=note[:200], created_by=user)
    audit_record(actor=user, action="git_source.added", obj=source, message=f"{user.username} allowed code from {entry}")
    return source


@transaction.atomic
def git_source_remove(*, user: User, source: GitSource) -> None:
    """Takes a source off the allow-list: launches that would fetch from it are refused in words,
    and a submission sent again after it is removed fails with the reason."""
    _require(user.has_perm("jobs.manage_git_sources"))
    audit_record(actor=user, action="git_source.removed", obj=source,
                 message=f"{user.username} no longer allows code from {source.prefix}")
    source.delete()


# --- The template editor: sharing, the launch preview and its dry run ----------------------------


def _require_template_scope(user: User, *, template: WorkloadTemplate | None, owner_team: Team | None) -> None:
    """Who may author here: platform admins anything; a lead their team's templates only."""
    if template is not None:
        _require(user.has_perm("jobs.manage_template", template))
    elif owner_team is None:
        _require(user.has_perm("jobs.create_global_template"))
    else:
        _require(user.has_perm("tenants.manage_members", owner_team))


@transaction.atomic
def template_share(*, user: User, template: WorkloadTemplate, is_global: bool, teams: list[Team]) -> WorkloadTemplate:
    """Who sees one of the portal's own templates: every team, or the teams chosen. Platform admins
    only; a team's own template stays its team's (its leads cannot hand it to other teams)."""
    _require(user.has_perm("jobs.create_global_template"))
    if template.owner_team_id is not None:
        raise DomainError(f"{template.name} belongs to {template.owner_team}; a team's own template is not shared.",
                          field="teams")
    if not is_global and not teams:
        raise DomainError("Choose the teams to share it with, or share it with every team.", field="teams")
    chosen = [] if is_global else sorted(teams, key=lambda team: team.slug)
    before = (template.is_global, sorted(template.teams.values_list("slug", flat=True)))
    after = (is_global, [team.slug for team in chosen])
    if before == after:
        return template
    template.is_global = is_global
    template.save(update_fields=["is_global"])
    template.teams.set(chosen)
    audience = "every team" if is_global else ", ".join(after[1])
    audit_record(actor=user, action="template.shared", obj=template, data={"is_global": is_global, "teams": after[1]},
                 message=f"{user.username} shared template {template.name} with {audience}")
    return template


PREVIEW_NAME = "wl-preview"


@dataclass(frozen=True)
class TemplatePreview:
    """What a launch with the template's defaults would create in `team`'s namespace, and what the
    API server said of it in a dry run (nothing stored): accepted, or its refusal in words."""

    team: Team | None
    objects: list[dict[str, Any]]
    checked: bool  # a dry run answered for every object
    refusal: str = ""

    @property
    def accepted(self) -> bool:
        return self.checked and not self.refusal


def _preview_workload(*, kind: str, fields: dict[str, Any], flavors: list[Flavor], team: Team) -> Workload:
    """The workload a member would launch with every default, unsaved: the launch's own builders
    turn it into manifests, so the preview is what a launch creates."""
    template = WorkloadTemplate(name="preview", kind=kind)
    version = WorkloadTemplateVersion(template=template, number=0, **fields)
    try:
        values = validate_parameters(declared=version.parameters or [], given={})
    except ParameterError as error:
        raise DomainError(str(error), field="parameters") from None
    workload = Workload(team=team, template_version=version, name="preview", parameters=values, flavor=flavors[0],
                        units=version.default_units, workers=_workers(version, values), cpu=version.default_cpu,
                        memory_gib=version.default_memory_gib, priority=version.default_priority)
    workload.pk = 0
    return workload


def template_preview(*, user: User, kind: str, fields: dict[str, Any], flavors: list[Flavor], team: Team | None,
                     template: WorkloadTemplate | None = None, owner_team: Team | None = None) -> TemplatePreview:
    """Checks a template version as saving would, builds the objects a launch with its defaults
    creates in `team`'s namespace, and asks the cluster to admit them with dryRun=All. The names
    are `wl-preview` here; a launch names them after the workload's id."""
    _require_template_scope(user, template=template, owner_team=owner_team)
    if not kinds.known(kind):
        raise DomainError(f"Kind must be one of {', '.join(kinds.KINDS)}.", field="kind")
    _check_version(fields, flavors, kind=kind)
    if team is None:
        return TemplatePreview(team=None, objects=[], checked=False)
    spec = workload_spec(_preview_workload(kind=kind, fields=fields, flavors=flavors, team=team))
    spec = replace(spec, workload_id=0, name=PREVIEW_NAME, notebook_token="preview" if spec.notebook_token else "")
    objects = kinds.workload_objects(spec=spec)
    cluster = gateway()
    for obj in objects:
        try:
            cluster.dry_run(obj)
        except KubeError as error:
            why = str(error) if error.status else f"the cluster did not answer, so the objects are unchecked: {error}"
            return TemplatePreview(team=team, objects=objects, checked=bool(error.status), refusal=why)
    return TemplatePreview(team=team, objects=objects, checked=True)


class DryRunRefused(DomainError):
    """The cluster refused (or could not check) what the version would create: nothing was saved."""

    def __init__(self, preview: TemplatePreview) -> None:
        super().__init__(f"Not saved: the API server refused what a launch would create in {preview.team}'s namespace: "
                         f"{preview.refusal}" if preview.checked else f"Not saved: {preview.refusal}")
        self.preview = preview


def template_publish(*, user: User, template: WorkloadTemplate | None, check_in: Team | None, flavors: list[Flavor],
                     fields: dict[str, Any], kind: str = "", slug: str = "", name: str = "", description: str = "",
                     owner_team: Team | None = None, is_global: bool | None = True,
                     teams: list[Team] | None = None) -> tuple[WorkloadTemplate, TemplatePreview]:
    """The editor's save (and the API's, through template_save): the dry run first, then a new
    template or a new version of `template` (and, for admins, who it is shared with; `is_global`
    None leaves that alone). A version the API server refuses is not saved: the preview that comes
    back carries the refusal. Without a team to check in, nothing is dry-run."""
    kind = template.kind if template else kind
    preview = template_preview(user=user, kind=kind, fields=fields, flavors=flavors, team=check_in, template=template,
                               owner_team=owner_team)
    if preview.team is not None and not preview.accepted:
        raise DryRunRefused(preview)
    with transaction.atomic():
        if template is None:
            template = template_create(user=user, slug=slug, name=name, kind=kind, description=description,
                                       owner_team=owner_team, flavors=flavors, **fields)
        else:
            template_revise(user=user, template=template, flavors=flavors, **fields)
        if is_global is not None and template.owner_team_id is None and user.has_perm("jobs.create_global_template"):
            template_share(user=user, template=template, is_global=is_global, teams=teams or [])
    return template, preview


def template_check_team(*, user: User, owner_team: Team | None, requested: Team | None) -> Team | None:
    """Where a save through the API is dry-run: a team template in its own team's namespace (the
    only one its leads may check in); one of the portal's own in the team asked for, else the first
    team the caller sees that the portal has provisioned. None only when no such team exists yet:
    there is no namespace to ask, and the answer says it was not checked."""
    if owner_team is not None:
        if requested is not None and requested.pk != owner_team.pk:
            raise DomainError(f"A template of {owner_team.slug} is checked in its own team's namespace, not in "
                              f"{requested.slug}'s.", field="check_in")
        return owner_team if owner_team.synced_at is not None else None
    if requested is not None:
        return requested
    return Team.objects.for_user(user).filter(synced_at__isnull=False).order_by("name").first()


def template_save(*, user: User, template: WorkloadTemplate | None, check_in: Team | None = None,
                  flavors: list[Flavor] | None = None, slug: str = "", name: str = "", kind: str = "",
                  description: str = "", owner_team: Team | None = None,
                  **changes: Any) -> tuple[WorkloadTemplate, TemplatePreview]:
    """The API's create (template None) and new version (`changes` on the current one): through
    template_publish, so the cluster's dry run guards it exactly as it guards the editor, and a
    version the API server refuses is not saved (DryRunRefused, a 400 in its words). A new version
    is saved with every setting as it was checked, not merged again onto a version published
    meanwhile."""
    unknown = set(changes) - set(TEMPLATE_VERSION_FIELDS)
    if unknown:
        raise DomainError(f"These template fields do not exist: {', '.join(sorted(unknown))}.")
    if template is None:
        fields, flavor_list = dict(changes), list(flavors or [])
    else:
        owner_team = template.owner_team
        current = template.current
        fields = {field: getattr(current, field) for field in TEMPLATE_VERSION_FIELDS} | changes
        flavor_list = list(flavors) if flavors is not None else list(current.flavors.all())
    _require_template_scope(user, template=template, owner_team=owner_team)
    team = template_check_team(user=user, owner_team=owner_team, requested=check_in)
    return template_publish(user=user, template=template, check_in=team, flavors=flavor_list, fields=fields, kind=kind,
                            slug=slug, name=name, description=description, owner_team=owner_team, is_global=None)
