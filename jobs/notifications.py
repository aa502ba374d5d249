"""Telling a workload's owner what happened to it: failed, preempted, stopped for idleness,
finished. In the portal (the bell) and by email after commit, as each person chose
(WorkloadNotificationPreference); the defaults hold for anyone who never chose."""

from __future__ import annotations

from django.db import transaction
from django.urls import reverse

from jobs.models import NotifyBy, Workload, WorkloadEvent, WorkloadNotificationPreference
from portal.models import User
from portal.notifications import notify

# The phase a workload reaches that is an event of its own; a stop for idleness is told by the
# idle reclaim, which knows why it stopped the workload (workload_event_notify below).
PHASE_EVENTS: dict[str, str] = {
    Workload.Phase.FAILED: WorkloadEvent.FAILED,
    Workload.Phase.PREEMPTED: WorkloadEvent.PREEMPTED,
    Workload.Phase.SUCCEEDED: WorkloadEvent.FINISHED,
}

_SAYS = {
    WorkloadEvent.FAILED: "failed",
    WorkloadEvent.PREEMPTED: "was preempted and is queued again",
    WorkloadEvent.IDLE_STOPPED: "was stopped because it sat idle",
    WorkloadEvent.FINISHED: "finished successfully",
}


def workload_notification_choice(*, user: User, event: str) -> str:
    """How the user hears about this event: off, in the portal, or also by email."""
    preference = WorkloadNotificationPreference.objects.filter(user=user).first()
    return preference.by(event) if preference else WorkloadNotificationPreference.DEFAULTS[WorkloadEvent(event)]


def workload_event_notify(*, workload: Workload, event: str, detail: str = "") -> bool:
    """Tells the workload's owner, as they chose. Returns whether anything was sent.

    The idle reclaim calls it with WorkloadEvent.IDLE_STOPPED and its reason as `detail`; the
    status sync calls it (through record_transition) when a workload fails, is preempted or
    finishes. Runs inside the caller's transaction: the email goes only after commit."""
    owner = workload.owner
    how = workload_notification_choice(user=owner, event=event)
    if how == NotifyBy.OFF:
        return False
    message = f"{workload.name} (#{workload.pk}) in {workload.team.slug} {_SAYS[WorkloadEvent(event)]}"
    message += f": {detail}" if detail else "."
    notify(recipients=[owner], message=message, url=reverse("jobs:workload-detail", args=[workload.pk]),
           email=how == NotifyBy.EMAIL)
    return True


@transaction.atomic
def workload_notification_preference_set(*, user: User, choices: dict[str, str]) -> WorkloadNotificationPreference:
    """Saves the user's choice per event; an event left out keeps what it was."""
    preference, _ = WorkloadNotificationPreference.objects.select_for_update().get_or_create(user=user)
    for event, how in choices.items():
        setattr(preference, WorkloadEvent(event).value, NotifyBy(how).value)
    preference.save()
    return preference
