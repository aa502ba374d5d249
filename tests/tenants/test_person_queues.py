"""A queue per person in each team (issue 27 §3): on Kueue every member, and anyone whose work is
still in the team, has a LocalQueue of their own, through which their work queues, so admission
fair sharing orders the team's waiting work by each one's recent use. Which queues the team
holds, how a launch finds its own, and what why-waiting says; Volcano keeps one queue a team."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from jobs import selectors as job_selectors
from jobs import services as job_services
from jobs import sync
from jobs.models import Workload
from portal.kube import ObjectRef, gateway
from tenants import desired, reconcile
from tenants import services as tenant_services
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
LOCAL_QUEUE = ("kueue.x-k8s.io/v1beta2", "LocalQueue")


def local_queues(team: Any) -> dict[str, dict[str, Any]]:
    items, _ = gateway().list(*LOCAL_QUEUE, namespace=team.namespace)
    return {item["metadata"]["name"]: item for item in items}


def launch(team: Any, user: Any, template: Any, flavor: Any, capture: Any, units: int = 1) -> Workload:
    with capture(execute=True):
        workload = job_services.workload_launch(user=user, request=job_services.LaunchRequest(
            team=team, template=template, flavor=flavor, units=units))
    workload.refresh_from_db()
    return workload


def test_each_member_has_a_queue_and_a_removed_one_keeps_theirs_while_their_work_is_in_the_team(
        ready_team, lead, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    reconcile.team_reconcile(team_id=ready_team.pk)
    assert set(local_queues(ready_team)) == {"default", f"person-{lead.pk}", f"person-{member.pk}"}
    work = launch(ready_team, member, training, flavor, django_capture_on_commit_callbacks)
    assert work.queue_name == f"person-{member.pk}"
    with django_capture_on_commit_callbacks(execute=True):
        tenant_services.membership_remove(actor=lead, membership=ready_team.memberships.get(user=member))
    assert f"person-{member.pk}" in desired.team_specs([ready_team.pk])[ready_team.pk][1].people
    reconcile.cluster_reconcile()
    assert f"person-{member.pk}" in local_queues(ready_team)  # their training still queues through it

    with django_capture_on_commit_callbacks(execute=True):
        job_services.workload_stop(user=lead, workload=work)
    assert f"person-{member.pk}" not in desired.team_specs([ready_team.pk])[ready_team.pk][1].people
    reconcile.cluster_reconcile()
    assert set(local_queues(ready_team)) == {"default", f"person-{lead.pk}"}


def test_a_launch_makes_its_owners_queue_where_the_team_pass_has_not_yet(
        ready_team, training, flavor, admin_user, simulated, django_capture_on_commit_callbacks):
    newcomer = UserFactory.create(username="nina")
    MembershipFactory(team=ready_team, user=newcomer)  # the team's pass has not run since
    assert f"person-{newcomer.pk}" not in local_queues(ready_team)
    theirs = launch(ready_team, newcomer, training, flavor, django_capture_on_commit_callbacks)
    assert theirs.phase == Workload.Phase.QUEUED
    assert local_queues(ready_team)[f"person-{newcomer.pk}"]["spec"] == {"clusterQueue": ready_team.cluster_queue,
                                                                        "stopPolicy": "None"}
    # A platform admin, in no team, launching into it: their queue is made as the team pass makes it.
    admins = launch(ready_team, admin_user, training, flavor, django_capture_on_commit_callbacks)
    assert admins.queue_name == f"person-{admin_user.pk}" and admins.queue_name in local_queues(ready_team)
    assert admins.queue_name in desired.team_specs([ready_team.pk])[ready_team.pk][1].people


def test_why_waiting_names_the_owners_recent_use_and_whose_work_is_ahead(
        ready_team, lead, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    reconcile.team_reconcile(team_id=ready_team.pk)
    held = [launch(ready_team, lead, training, flavor, capture, units=2) for _ in range(2)]  # the team's 4
    simulated.advance(1)
    mine = launch(ready_team, lead, training, flavor, capture)
    simulated.advance(2)
    theirs = launch(ready_team, member, training, flavor, capture)
    simulated.advance(1)
    sync.sync_all()
    assert [Workload.objects.get(pk=w.pk).phase for w in held] == [Workload.Phase.RUNNING] * 2
    for workload in (mine, theirs):
        workload.refresh_from_db()
    first = job_selectors.why_waiting(workload=theirs)
    assert first.position == 1 and first.order == (
        "Kueue admits the team's waiting work by each person's recent use, least first, then by priority and age. "
        "alice's recent use: 0.0.")
    second = job_selectors.why_waiting(workload=mine)
    assert second.position == 2 and second.ahead == [theirs]
    assert second.order.endswith("lena's recent use: under 0.1. Ahead of it: alice's (0.0).")


def test_volcano_keeps_one_queue_a_team_and_says_nothing_of_recent_use(
        ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    with override_settings(PORTAL_QUEUE_BACKEND="volcano"):
        assert desired.team_specs([ready_team.pk])[ready_team.pk][1].people == ()
        with django_capture_on_commit_callbacks(execute=True):
            workload = job_services.workload_launch(user=member, request=job_services.LaunchRequest(
                team=ready_team, template=training, flavor=flavor))
        assert workload.queue_name == ""
        assert job_selectors.person_order_reason(workload=workload, ahead=[]) == ""
    assert gateway().get(ObjectRef(*LOCAL_QUEUE, f"person-{member.pk}", ready_team.namespace)) is None

