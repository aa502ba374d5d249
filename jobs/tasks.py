"""Workload tasks: take ids, reload, safe to run twice."""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Q, prefetch_related_objects
from django.utils import timezone

from jobs import credentials, kinds, manifests, reclaim, services, sync, volumes, xid
from jobs.models import Workload
from portal.audit import audit_record
from portal.errors import DomainError
from portal.kube import KubeError, gateway, ref_of
from portal.tasks import GaveUp, cluster_task, send_on_commit
from tenants import queueing
from tenants import reconcile as tenant_reconcile

log = logging.getLogger(__name__)
# The resubmit pass runs every 30 s (CELERY_BEAT_SCHEDULE): a launch recorded while Redis was down
# is sent within that of Redis coming back (and of the worker reconnecting).
RESUBMIT_EXPIRES_SECONDS = 30


def _load(workload_id: int, *, task: str) -> Workload | None:
    # The owner too: a submission asks again which tiers the owner may launch at.
    workload = (Workload.objects.select_related("team", "owner", "flavor", "template_version__template")
                .filter(pk=workload_id).first())
    if workload is None:
        # Deleted while its message waited (with its team, say): trying again cannot bring it back.
        log.info("%s: workload %s no longer exists; nothing to do", task, workload_id)
    return workload


def _submit_gave_up(error: KubeError, workload_id: int) -> None:
    """A refused submission, or one the cluster never answered, leaves the workload failed with
    the reason, never lost; and whatever of it the cluster did take (the Deployment applied
    before its Service was refused) is torn down, so nothing runs or holds quota behind it."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().filter(pk=workload_id).first()
        if workload is not None and workload.phase == Workload.Phase.SUBMITTING:
            services.record_transition(workload, Workload.Phase.FAILED, f"The cluster did not take it: {error}")
            send_on_commit(workload_teardown, workload_id, unsent=lambda: services.mark_unsent(workload_id))


def _change_gave_up(action: str, what: str) -> GaveUp:
    """A change to a workload already running (apply again, tear down) that the cluster refused
    does not make the workload failed: it is written to the audit trail with the reason."""

    def record(error: KubeError, workload_id: int) -> None:
        workload = Workload.objects.filter(pk=workload_id).first()
        if workload is not None:
            audit_record(actor=None, action=action, obj=workload, team_id=workload.team_id,
                         message=f"The cluster did not take {what} of {workload.name}: {error}")

    return record


@cluster_task(gave_up=_submit_gave_up)
def workload_submit(workload_id: int) -> str:
    """Creates the workload's objects, suspended and queued."""
    workload = _load(workload_id, task="submit")
    if workload is None or workload.phase != Workload.Phase.SUBMITTING:
        return "nothing to do"
    # Its flavors are asked twice (their RuntimeClasses, then their placement): read them once.
    prefetch_related_objects([workload], "accepted_flavors")
    # A submission sent again may come after its owner lost the role its tier needs, its image left
    # the allow-list or its data volume was deleted: the launch's checks hold for the cluster, not
    # only for the form. Not knowing (the claim could not be read) is retried, not a refusal.
    try:
        refusal = services.submission_refusal(workload)
        if refusal:
            services.record_transition(workload, Workload.Phase.FAILED, f"Not created in the cluster: {refusal}")
            return "failed"
        objects = kinds.workload_objects(spec=services.workload_spec(workload))
        if workload.queue_name:
            tenant_reconcile.person_queue_ensure(team=workload.team, name=workload.queue_name)
        for obj in objects:
            gateway().apply(obj)
    except DomainError as error:
        services.record_transition(workload, Workload.Phase.FAILED, error.message)
        return "failed"
    except KubeError:
        Workload.objects.filter(pk=workload.pk).update(submit_attempts=workload.submit_attempts + 1)
        raise
    _submitted_record(workload.pk)
    return "submitted"


@transaction.atomic
def _submitted_record(workload_id: int) -> None:
    """Stamps the submission once the cluster holds the workload's objects. The status sync may
    have seen the objects (and recorded queued, admitted or running) while they were being
    created, or the owner may have stopped the workload: only a workload still submitting moves
    to queued, so a later phase is never undone."""
    current = Workload.objects.select_for_update().get(pk=workload_id)
    stamped: tuple[str, ...] = ()
    if current.submitted_at is None:
        current.submitted_at = timezone.now()
        stamped = ("submitted_at",)
    if current.phase == Workload.Phase.SUBMITTING:
        # What the queue says of a workload it does not know yet.
        services.record_transition(current, Workload.Phase.QUEUED, queueing.backend().admission([]).waiting,
                                   also_save=stamped)
    else:
        if stamped:
            current.save(update_fields=list(stamped))
        if current.phase == Workload.Phase.STOPPED:
            # Its teardown may have run before these objects existed: remove them again.
            send_on_commit(workload_teardown, current.pk, unsent=lambda: services.mark_unsent(current.pk))


@cluster_task(gave_up=_change_gave_up("workload.apply_refused", "the change"))
def workload_apply(workload_id: int) -> None:
    """Applies a running workload's objects again after a change (e.g. its replicas)."""
    workload = _load(workload_id, task="apply")
    if (workload is None or not workload.is_active or workload.phase == Workload.Phase.SUBMITTING
            or workload.waits_for_person_limit):
        return  # not in the cluster yet: its submission applies what it is then
    for obj in kinds.workload_objects(spec=services.workload_spec(workload)):
        gateway().apply(obj)


@cluster_task(gave_up=_change_gave_up("workload.teardown_refused", "the removal"))
def workload_teardown(workload_id: int) -> None:
    """Deletes every object of a stopped workload; its pods go with them."""
    workload = _load(workload_id, task="teardown")
    if workload is None:
        return
    spec = services.workload_spec(workload)
    objects = kinds.workload_objects(spec=spec)
    for obj in reversed(objects):
        gateway().delete(ref_of(obj))
    if spec.ingress is not None:
        # Made before the site moved from Ingresses to a Gateway (or back): its route of the other kind goes too.
        made = {ref_of(obj) for obj in objects}
        for ref in manifests.route_refs(spec):
            if ref not in made:
                gateway().delete(ref)


@shared_task(acks_late=True)
def workloads_sync() -> dict[str, int]:
    return sync.sync_all().as_dict()


def unsubmitted_reason(*, minutes: int, attempts: int) -> str:
    tried = f" ({attempts} attempt{'s' if attempts != 1 else ''} so far)" if attempts else ""
    return (f"Not submitted yet: no worker has taken it for {minutes} minute{'s' if minutes != 1 else ''}{tried}; "
            "the portal's worker may be down — it is being retried.")


@shared_task(acks_late=True)
def person_limit_release(team_id: int, owner_id: int | None = None) -> int:
    """Sends the team's (or one owner's) workloads waiting for the per-person limit that now fit."""
    released = services.person_limit_release(team_id=team_id, owner_id=owner_id)
    if released is None:
        log.info("person limits: team %s no longer exists; nothing to release", team_id)
        return 0
    return len(released)


@shared_task(acks_late=True)
def person_limits_release_all() -> int:
    """The safety net of the release a workload's end sends (a lost message, a limit changed):
    every team with work waiting for its per-person limit. One indexed read when none waits."""
    teams = set(Workload.objects.filter(waits_for_person_limit=True, phase=Workload.Phase.QUEUED)
                .values_list("team_id", flat=True))
    return sum(len(services.person_limit_release(team_id=team_id) or []) for team_id in sorted(teams))


@shared_task(acks_late=True)
def workloads_resubmit_lost() -> int:
    """A submission whose task was lost (a broker restart, a dead worker) is sent again: creating is
    idempotent. Each says why it still waits, on its page and in the API, instead of only
    'Submitting'. One the broker never took (`unsent_since`) goes at once; any other once it has
    waited PORTAL_SUBMITTING_BOUND_SECONDS, since its message may merely be in the queue. The
    removal of a workload stopped, and the change of one running, while the broker was away are
    sent again too. Returns the number of submissions sent."""
    now = timezone.now()
    bound = dt.timedelta(seconds=settings.PORTAL_SUBMITTING_BOUND_SECONDS)
    lost = Workload.objects.filter(Q(created_at__lt=now - bound) | Q(unsent_since__isnull=False),
                                   phase=Workload.Phase.SUBMITTING).order_by("created_at")
    rows = list(lost.values_list("pk", "created_at", "submit_attempts", "unsent_since")[:500])
    for workload_id, created_at, attempts, unsent_since in rows:
        if created_at < now - bound:
            minutes = max(int((now - created_at).total_seconds() // 60), 1)
            # Guarded by the phase: a worker that submitted it meanwhile keeps its own reason.
            Workload.objects.filter(pk=workload_id, phase=Workload.Phase.SUBMITTING).update(
                reason=unsubmitted_reason(minutes=minutes, attempts=attempts))
        # Expires before the next pass sends it again, so a worker that comes back after a long
        # outage finds one submission per workload, not one per missed pass.
        workload_submit.apply_async((workload_id,), expires=RESUBMIT_EXPIRES_SECONDS)
        if unsent_since is not None:
            Workload.objects.filter(pk=workload_id, unsent_since=unsent_since).update(unsent_since=None)
    if rows:
        log.warning("Resubmitted %d workload(s) still submitting (lost, or never taken by the broker)", len(rows))
    # A stop recorded while the broker was away (of a running or a failed workload): its objects
    # would hold their GPUs until removed. Removing what is already gone is harmless.
    stopped = Workload.objects.filter(phase__in=(Workload.Phase.STOPPED, Workload.Phase.FAILED),
                                      unsent_since__isnull=False)
    for workload_id, unsent_since in stopped.values_list("pk", "unsent_since")[:500]:
        workload_teardown.apply_async((workload_id,), expires=RESUBMIT_EXPIRES_SECONDS)
        Workload.objects.filter(pk=workload_id, unsent_since=unsent_since).update(unsent_since=None)
    # A change of a running workload (its replicas, by hand or by the idle policy) recorded while the
    # broker was away: applying its objects again is idempotent.
    changed = Workload.objects.filter(phase__in=(Workload.Phase.QUEUED, Workload.Phase.ADMITTED, Workload.Phase.RUNNING),
                                      unsent_since__isnull=False)
    for workload_id, unsent_since in changed.values_list("pk", "unsent_since")[:500]:
        workload_apply.apply_async((workload_id,), expires=RESUBMIT_EXPIRES_SECONDS)
        Workload.objects.filter(pk=workload_id, unsent_since=unsent_since).update(unsent_since=None)
    return len(rows)


@shared_task(acks_late=True)
def volumes_repair() -> int:
    """Data volumes a failed call left half made, grown or deleted, finished (jobs/volumes.py)."""
    return volumes.volumes_repair()


@shared_task(acks_late=True)
def credentials_repair() -> int:
    """Credentials' Secrets left by a deletion or a making that did not finish, deleted (jobs/credentials.py)."""
    return credentials.credentials_repair()


@shared_task(acks_late=True)
def idle_sweep() -> dict[str, int]:
    """Idle workloads warned and reclaimed by their policy (jobs/reclaim.py): one metrics query."""
    sweep = reclaim.idle_sweep()
    return {"idle": len(sweep.idle), "no_metrics": len(sweep.no_metrics), "warned": len(sweep.warned),
            "stopped": len(sweep.stopped), "scaled": len(sweep.scaled)}


@shared_task(acks_late=True)
def xid_sweep() -> int:
    """XID errors on running workloads' GPUs recorded and told (jobs/xid.py): one metrics query."""
    return len(xid.xid_sweep())
