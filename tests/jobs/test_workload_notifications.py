"""A workload's owner hears that it failed, was preempted, was stopped for idleness or finished:
in the portal and by email, as each person chose."""

from __future__ import annotations

import pytest
from django.core import mail
from django.urls import reverse

from jobs import notifications, services
from jobs.models import NotifyBy, Workload, WorkloadEvent, WorkloadNotificationPreference
from portal.models import Notification
from tests.conftest import login
from tests.helpers import launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(ready_team, member, training, flavor):
    return launch(member, ready_team, training, flavor, name="resnet")


def test_a_failure_reaches_the_owner_in_the_portal_and_by_email_by_default(run, member, lead,
                                                                           django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.record_transition(run, Workload.Phase.FAILED, "BackoffLimitExceeded: Job has reached the backoff limit")

    note = Notification.objects.get(recipient=member)
    assert note.message == (f"resnet (#{run.pk}) in vision failed: BackoffLimitExceeded: Job has reached the backoff limit")
    assert note.url == reverse("jobs:workload-detail", args=[run.pk])
    assert [m.to for m in mail.outbox] == [[member.email]]
    assert not Notification.objects.filter(recipient=lead).exists()


def test_each_event_is_told_once_when_the_workload_enters_it(run, member):
    services.record_transition(run, Workload.Phase.PREEMPTED, "Preempted and queued again: reclaimed")
    services.record_transition(run, Workload.Phase.PREEMPTED, "Preempted and queued again: still waiting")
    services.record_transition(run, Workload.Phase.RUNNING, "1 of 1 pods running")

    assert list(Notification.objects.filter(recipient=member).values_list("message", flat=True)) == [
        f"resnet (#{run.pk}) in vision was preempted and is queued again."]


def test_finished_runs_are_told_only_to_those_who_asked_and_as_they_asked(run, member, django_capture_on_commit_callbacks):
    services.record_transition(run, Workload.Phase.SUCCEEDED, "Finished successfully")
    assert not Notification.objects.exists()

    notifications.workload_notification_preference_set(user=member, choices={"finished": NotifyBy.APP})
    Workload.objects.filter(pk=run.pk).update(phase=Workload.Phase.RUNNING)
    run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        services.record_transition(run, Workload.Phase.SUCCEEDED, "Finished successfully")

    assert Notification.objects.get(recipient=member).message == f"resnet (#{run.pk}) in vision finished successfully."
    assert mail.outbox == []


def test_the_idle_reclaim_tells_the_owner_unless_they_turned_it_off(run, member):
    said = notifications.workload_event_notify(workload=run, event=WorkloadEvent.IDLE_STOPPED,
                                               detail="no GPU use for 2 hours")
    assert said and Notification.objects.get().message == (
        f"resnet (#{run.pk}) in vision was stopped because it sat idle: no GPU use for 2 hours")

    notifications.workload_notification_preference_set(user=member, choices={"idle_stopped": NotifyBy.OFF})
    assert not notifications.workload_event_notify(workload=run, event=WorkloadEvent.IDLE_STOPPED)
    assert Notification.objects.count() == 1


def test_the_page_saves_each_persons_choice_and_refuses_an_unknown_one_in_words(member, lead):
    client = login(member)
    page = client.get(reverse("jobs:notification-preferences")).content.decode()
    assert 'data-testid="notify-finished"' in page

    assert client.post(reverse("jobs:notification-preferences"), {"failed": "app", "finished": "email"}).status_code == 200
    refused = client.post(reverse("jobs:notification-preferences"), {"failed": "sms"})

    assert refused.status_code == 400
    assert "Choose how to hear about “failed”: not at all, in the portal, in the portal and by email." in refused.content.decode()
    preference = WorkloadNotificationPreference.objects.get(user=member)
    assert (preference.failed, preference.finished, preference.preempted) == ("app", "email", "email")
    assert notifications.workload_notification_choice(user=lead, event="finished") == NotifyBy.OFF
    assert 'href="/workloads/notifications/"' in client.get(reverse("notifications")).content.decode()
