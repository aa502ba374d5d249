"""Idle GPUs reclaimed by policy: the periodic sweep and the owner's "Keep running".

One metrics query per sweep, whatever the number of running workloads: each pod's engine active
over the last 5 minutes (Prometheus's recording rule). A workload under its policy's threshold
is idle from then on; once idle for the policy's window its owner is warned in the portal and by
email, with a Keep running button; after the grace the policy's action is taken (stop, or scale
an inference server down to its minimum replicas) and the reason recorded. A workload none of
whose pods report (exporter down, pod just started, telemetry off) has "no metrics": it is never
idle, and a warning it had is withdrawn. For notebooks the notebook server's own last activity
(jobs/idle.py) is a second signal where the portal can reach it: use more recent than the GPU's
idleness keeps the notebook; the GPU signal decides everywhere else. A notebook or workspace on a
CPU-only flavor has no GPU to judge: its server's own last activity is the one signal, idle from
then for the policy's window (one it cannot reach is never judged idle, as without metrics).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from jobs import idle_policy
from jobs.idle import notebook_activity
from jobs.idle_policy import IdleAction
from jobs.models import (
    IdleDefaults,
    RunInterval,
    Workload,
    WorkloadEvent,
    WorkloadIdleState,
)
from jobs.notifications import workload_event_notify
from jobs.services import mark_unsent, record_transition
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.metrics import MetricsError, PodKey, metrics
from portal.models import User
from portal.notifications import notify
from portal.tasks import send_on_commit

log = logging.getLogger(__name__)

SAMPLE_WINDOW = dt.timedelta(minutes=5)


@dataclass
class Sweep:
    """What one sweep saw and did, by workload id."""

    busy: list[int] = field(default_factory=list)
    idle: list[int] = field(default_factory=list)
    no_metrics: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    warned: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    scaled: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    error: str = ""  # the metrics query failed: nothing was judged


def idle_sweep(*, now: dt.datetime | None = None) -> Sweep:
    now = now or timezone.now()
    result = Sweep()
    running = list(Workload.objects.filter(phase=Workload.Phase.RUNNING)
                   .select_related("team", "owner", "flavor", "template_version__template"))
    if not running:
        return result
    pods: dict[int, list[RunInterval]] = defaultdict(list)
    for interval in RunInterval.objects.filter(workload__in=running, ended_at__isnull=True).only(
            "workload_id", "pod_name", "started_at"):
        pods[interval.workload_id].append(interval)  # type: ignore[index]
    states = {s.workload_id: s for s in WorkloadIdleState.objects.filter(workload__in=running)}
    try:
        activity = metrics().engine_active(namespaces={w.team.namespace for w in running}, window=SAMPLE_WINDOW).by_pod
    except MetricsError as error:
        log.warning("the idle sweep could not read GPU metrics (%s); nothing was judged idle", error)
        result.error = str(error)
        return result
    bounds = IdleDefaults.current()
    for workload in running:
        try:
            values = [activity[key] for key in (PodKey(workload.team.namespace, p.pod_name) for p in pods[workload.pk])
                      if key in activity]
            percent = sum(values) / len(values) if values else None
            state = states.get(workload.pk) or WorkloadIdleState(workload=workload)
            started = min((p.started_at for p in pods[workload.pk]), default=now)
            policy = idle_policy.effective_policy(workload.template_version, bounds)
            if workload.flavor.is_cpu:
                _judge_unused(workload, state, started, policy, now=now, result=result)
            else:
                _judge(workload, state, percent, started, policy, now=now, result=result)
        except Exception:
            result.failed.append(workload.pk)
            log.exception("judging whether workload %s of %s is idle failed; skipped", workload.pk, workload.team.slug)
    return result


def _judge(workload: Workload, state: WorkloadIdleState, percent: float | None, started: dt.datetime,
           policy: idle_policy.IdlePolicy, *, now: dt.datetime, result: Sweep) -> None:
    state.checked_at, state.engine_active = now, percent
    if percent is None or percent >= policy.threshold_percent:
        (result.no_metrics if percent is None else result.busy).append(workload.pk)
        state.idle_since = state.warned_at = state.action_due_at = None
        state.save()
        return
    result.idle.append(workload.pk)
    window = dt.timedelta(minutes=policy.window_minutes)
    # Idleness counts from the sample that showed it, never before the pod started or the owner kept it.
    kept_at = state.kept_until - window if state.kept_until else started
    state.idle_since = state.idle_since or max(now - SAMPLE_WINDOW, started, kept_at)
    if state.kept_until and now < state.kept_until:
        result.kept.append(workload.pk)
    elif now - state.idle_since >= window and workload.kind_facts.portal_reaches and _notebook_used_since(
            workload, state.idle_since):
        # Someone works in it without the GPU: idle again from here at the earliest, and any warning withdrawn.
        state.idle_since, state.warned_at, state.action_due_at = now, None, None
    elif now - state.idle_since >= window and state.warned_at is None:
        _warn(workload, state, policy, now=now)
        result.warned.append(workload.pk)
    else:
        _act_when_due(workload, state, policy, now=now, result=result)
    state.save()


def _act_when_due(workload: Workload, state: WorkloadIdleState, policy: idle_policy.IdlePolicy, *, now: dt.datetime,
                  result: Sweep) -> None:
    """The policy's action, once a warned workload's grace is over."""
    if state.action_due_at is None or now < state.action_due_at or state.idle_since is None:
        return
    state.save()
    if _act(workload, policy, idle_minutes=int((now - state.idle_since).total_seconds() // 60)):
        (result.stopped if policy.action == IdleAction.STOP else result.scaled).append(workload.pk)
        state.idle_since = state.warned_at = state.action_due_at = None


def _judge_unused(workload: Workload, state: WorkloadIdleState, started: dt.datetime, policy: idle_policy.IdlePolicy,
                  *, now: dt.datetime, result: Sweep) -> None:
    """A workload without a GPU (a CPU-only flavor's) is idle from its server's last activity, never
    before its pod started or its owner kept it; use after a warning withdraws it."""
    state.checked_at, state.engine_active = now, None
    activity = notebook_activity(workload) if workload.kind_facts.activity else None
    if activity is None or activity.last_activity is None:
        result.no_metrics.append(workload.pk)
        state.idle_since = state.warned_at = state.action_due_at = None
        state.save()
        return
    window = dt.timedelta(minutes=policy.window_minutes)
    kept_at = state.kept_until - window if state.kept_until else started
    state.idle_since = max(activity.last_activity, started, kept_at)
    if now - state.idle_since < window or (state.warned_at is not None and activity.last_activity > state.warned_at):
        result.busy.append(workload.pk)  # used within the window, or since the warning (withdrawn)
        state.idle_since = state.warned_at = state.action_due_at = None
    elif state.kept_until and now < state.kept_until:
        result.idle.append(workload.pk)
        result.kept.append(workload.pk)
    elif state.warned_at is None:
        result.idle.append(workload.pk)
        _warn(workload, state, policy, now=now)
        result.warned.append(workload.pk)
    else:
        result.idle.append(workload.pk)
        _act_when_due(workload, state, policy, now=now, result=result)
    state.save()


def idle_words(workload: Workload, policy: idle_policy.IdlePolicy) -> str:
    """What made the workload idle, in a sentence's words."""
    if workload.flavor.is_cpu:
        return f"its {workload.kind_facts.noun} not used"
    return f"its GPUs under {policy.threshold_percent} % engine active"


def _notebook_used_since(workload: Workload, since: dt.datetime) -> bool:
    """The notebook server's own word, where the portal can reach it: used after `since`."""
    activity = notebook_activity(workload)
    if activity.last_activity is None:
        log.info("notebook %s of %s did not say how idle it is (%s); its GPU decides", workload.pk, workload.team.slug,
                 activity.unreachable or activity.unreadable)
    return activity.last_activity is not None and activity.last_activity > since


def _warn(workload: Workload, state: WorkloadIdleState, policy: idle_policy.IdlePolicy, *, now: dt.datetime) -> None:
    state.warned_at = now
    state.action_due_at = None if policy.action == IdleAction.NOTIFY else now + dt.timedelta(minutes=policy.grace_minutes)
    assert state.idle_since is not None
    minutes = int((now - state.idle_since).total_seconds() // 60)
    what = f"Your {workload.kind_facts.label.lower()} {workload.name} (#{workload.pk})"
    message = f"{what} has been idle {minutes} min ({idle_words(workload, policy)})"
    if state.action_due_at is not None:
        verb = "stops" if policy.action == IdleAction.STOP else "scales down to its minimum replicas"
        at = timezone.localtime(state.action_due_at).strftime("%H:%M")
        message += f"; it {verb} at {at} unless you keep it running."
    else:
        message += f": stop it if you are done, so others can use {'its CPUs' if workload.flavor.is_cpu else 'the GPUs'}."
    url = reverse("jobs:workload-detail", args=[workload.pk])
    with transaction.atomic():
        notify(recipients=[workload.owner], message=message, url=url)
        audit_record(actor=None, action="workload.idle_warned", obj=workload, team_id=workload.team_id,
                     message=f"{workload.owner.username} was warned that {workload.name} (#{workload.pk}) of "
                             f"{workload.team.slug} has been idle {minutes} minutes")


def _act(workload: Workload, policy: idle_policy.IdlePolicy, *, idle_minutes: int) -> bool:
    """Stops or scales down an idle workload, with the reason. False if it was no longer running."""
    why = f"idle {idle_minutes} minutes with {idle_words(workload, policy)} (the idle policy of {workload.template_version})"
    with transaction.atomic():
        locked = Workload.objects.select_for_update(of=("self",)).select_related("team").get(pk=workload.pk)
        if locked.phase != Workload.Phase.RUNNING:
            return False
        if policy.action == IdleAction.STOP:
            record_transition(locked, Workload.Phase.STOPPED, f"Stopped: {why}")
            audit_record(actor=None, action="workload.stopped_idle", obj=locked, team_id=locked.team_id,
                         message=f"{locked.name} (#{locked.pk}) of {locked.team.slug} stopped: {why}")
            send_on_commit("jobs.tasks.workload_teardown", locked.pk, unsent=functools.partial(mark_unsent, locked.pk))
            workload_event_notify(workload=locked, event=WorkloadEvent.IDLE_STOPPED, detail=why)  # as the owner chose
            return True
        low = minimum_replicas(locked)
        if locked.workers <= low:
            return False
        before, locked.workers = locked.workers, low
        declared = {spec["name"] for spec in locked.template_version.parameters}
        locked.parameters = {**locked.parameters, ("workers" if "workers" in declared else "replicas"): low}
        locked.save(update_fields=["workers", "parameters"])
        audit_record(actor=None, action="workload.scaled_idle", obj=locked, team_id=locked.team_id,
                     message=f"{locked.name} (#{locked.pk}) of {locked.team.slug} scaled from {before} to {low} "
                             f"replicas: {why}")
        send_on_commit("jobs.tasks.workload_apply", locked.pk, unsent=functools.partial(mark_unsent, locked.pk))
        notify(recipients=[workload.owner], message=f"{locked.name} (#{locked.pk}) was scaled from {before} to {low} "
               f"replicas: {why}.", url=reverse("jobs:workload-detail", args=[locked.pk]))
        return True


def minimum_replicas(workload: Workload) -> int:
    declared = {spec["name"]: spec for spec in workload.template_version.parameters}
    spec = declared.get("workers") or declared.get("replicas") or {}
    low = spec.get("min", 1)
    return low if isinstance(low, int) and not isinstance(low, bool) and low >= 1 else 1


@transaction.atomic
def workload_keep_running(*, user: User, workload: Workload, now: dt.datetime | None = None) -> WorkloadIdleState:
    """The owner (or a lead, or a platform admin) keeps a warned workload: it is not judged idle
    again for one window. Once per warning, audited."""
    if not user.has_perm("jobs.stop_workload", workload):
        raise PermissionDenied
    now = now or timezone.now()
    state = WorkloadIdleState.objects.select_for_update().filter(workload=workload).first()
    if workload.phase != Workload.Phase.RUNNING:
        raise StateConflict(f"{workload.name} is {workload.get_phase_display().lower()}; there is nothing to keep running.")
    if state is None or state.warned_at is None:
        if state is not None and state.kept_until and state.kept_until > now:
            at = timezone.localtime(state.kept_until).strftime("%H:%M")
            raise StateConflict(f"{workload.name} is already kept running until {at}.")
        raise DomainError(f"{workload.name} has not been warned as idle; there is nothing to keep.")
    policy = idle_policy.effective_policy(workload.template_version, IdleDefaults.current())
    state.kept_until = now + dt.timedelta(minutes=policy.window_minutes)
    state.kept_by = user
    state.idle_since = state.warned_at = state.action_due_at = None
    state.save()
    at = timezone.localtime(state.kept_until).strftime("%H:%M")
    audit_record(actor=user, action="workload.kept_running", obj=workload, team_id=workload.team_id,
                 message=f"{user.username} kept {workload.name} (#{workload.pk}) of {workload.team.slug} running "
                         f"though idle; it is not judged idle again before {at}")
    return state


@dataclass(frozen=True)
class IdlePicture:
    """What the workload page says of idleness: the policy, and where the sweep is with it."""

    policy: idle_policy.IdlePolicy
    state: WorkloadIdleState | None
    without_gpu: bool = False  # on a CPU-only flavor: judged by its server's own last activity

    @property
    def describe(self) -> str:
        if not self.without_gpu:
            return self.policy.describe()
        after = "" if self.policy.action == IdleAction.NOTIFY else (
            f", then {IdleAction(self.policy.action).label.lower()} {self.policy.grace_minutes} minutes later")
        return f"idle when it has not been used for {self.policy.window_minutes} minutes: the owner is warned{after}"

    @property
    def idle_minutes(self) -> int | None:
        if self.state is None or self.state.idle_since is None or self.state.checked_at is None:
            return None
        return int((self.state.checked_at - self.state.idle_since).total_seconds() // 60)

    @property
    def kept(self) -> bool:
        return self.state is not None and self.state.kept_until is not None and self.state.kept_until > timezone.now()

    @property
    def no_metrics(self) -> bool:
        return self.state is not None and self.state.checked_at is not None and self.state.engine_active is None


def idle_picture(*, workload: Workload) -> IdlePicture | None:
    if workload.phase != Workload.Phase.RUNNING:
        return None
    state = WorkloadIdleState.objects.filter(workload=workload).select_related("kept_by").first()
    return IdlePicture(policy=idle_policy.effective_policy(workload.template_version, IdleDefaults.current()), state=state,
                       without_gpu=workload.flavor.is_cpu)


IDLE_DEFAULT_FIELDS = (
    "threshold_percent", "window_minutes", "action", "grace_minutes", "min_threshold_percent", "max_threshold_percent",
    "min_window_minutes", "max_window_minutes", "min_grace_minutes", "max_grace_minutes", "allowed_actions",
)


@transaction.atomic
def idle_defaults_set(*, user: User, **changes: object) -> IdleDefaults:
    """Platform admins set the idle policy's default and the bounds template owners choose within.
    Versions already published keep their choice; one outside new bounds is still applied as set."""
    if not user.has_perm("tenants.manage_teams"):
        raise PermissionDenied
    unknown = set(changes) - set(IDLE_DEFAULT_FIELDS)
    if unknown:
        raise DomainError(f"These idle policy settings do not exist: {', '.join(sorted(unknown))}.")
    defaults = IdleDefaults.objects.select_for_update().order_by("pk").first() or IdleDefaults()
    for name, value in changes.items():
        setattr(defaults, name, value)
    problems = idle_policy.defaults_problems(defaults)
    if problems:
        name, problem = next(iter(problems.items()))
        raise DomainError(problem, field=name)
    defaults.updated_by, defaults.updated_at = user, timezone.now()
    defaults.save()
    default = idle_policy.platform_default(defaults)
    audit_record(actor=user, action="idle_defaults.set", obj=defaults, team_id=None,
                 message=f"{user.username} set the platform's idle policy: {default.describe()}")
    return defaults
