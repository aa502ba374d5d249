"""'Why is it waiting?': Kueue's reason in the portal's words, the place in the queue from Kueue's
visibility API (or the portal's estimate, saying so), who holds the flavor, and an estimated start."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import selectors, sync
from jobs.models import RunInterval, Workload
from tenants.queueing import kueue
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("couldn't assign flavors: insufficient unused quota for nvidia.com/gpu in flavor h100-80gb, 4 more needed",
         "Waiting for quota: the team's free h100-80gb quota and what other teams leave idle are 4 units short."),
        ("insufficient quota for nvidia.com/gpu in flavor h100-80gb, request > maximum capacity (24 > 16)",
         "it asks for more h100-80gb than the team could ever get"),
        ("LocalQueue default is inactive", "the team's queue is on hold"),
        ("", "Waiting for Kueue to admit it"),
        ("something new", "Waiting for Kueue, which says: something new"),
    ],
)
def test_kueues_messages_are_said_in_the_portals_words(message, said):
    assert said in kueue.waiting_reason(message)


@pytest.fixture
def queue(team, other_team, flavor, simulated, member, training, django_capture_on_commit_callbacks):
    """vision (4 guaranteed, may not borrow) runs 4 units; a low and then a normal priority
    launch wait, the later one first in Kueue's order. speech runs 2 of its own 12."""
    make_ready(team, flavor, 4, may_borrow=False)
    make_ready(other_team, flavor, 12)
    speaker = UserFactory(username="sam")
    MembershipFactory(team=other_team, user=speaker)
    with django_capture_on_commit_callbacks(execute=True):
        running = launch(member, team, training, flavor, units=4, name="big")
        launch(speaker, other_team, training, flavor, units=2, name="speech-run")
    simulated.advance(1)
    with django_capture_on_commit_callbacks(execute=True):
        older = launch(member, team, training, flavor, units=2, name="older", priority="low")
        urgent = launch(member, team, training, flavor, units=2, name="urgent")
    simulated.advance(1)
    sync.sync_all()
    return running, older, urgent


def test_the_position_comes_from_kueues_visibility_api_where_the_cluster_serves_it(queue, member, simulated):
    running, older, urgent = queue
    answer = api(member).get(f"/api/workloads/{older.pk}/why-waiting/").json()

    assert (answer["position"], answer["position_source"], answer["ahead"]) == (2, "kueue", [urgent.pk])
    assert answer["reason"].startswith("Waiting for quota: the team's free h100-80gb quota")
    assert {h["team"]: (h["in_use"], h["borrowed"]) for h in answer["holders"]} == {"Vision": (4, 0), "Speech": (2, 0)}

    page = login(member).get(reverse("jobs:workload-detail", args=[older.pk])).content.decode()
    assert "Kueue lists it <strong>number 2</strong> in vision's queue; ahead of it:" in page
    assert "a later or smaller workload that fits the free quota may start first" in page
    assert "next in line" not in page and "couldn't assign flavors" not in page


def test_without_the_visibility_api_the_page_says_the_position_is_the_portals_estimate(queue, member, simulated):
    running, older, urgent = queue
    simulated.serves_visibility = False

    answer = api(member).get(f"/api/workloads/{urgent.pk}/why-waiting/").json()
    assert (answer["position"], answer["position_source"], answer["ahead"]) == (1, "estimate", [])
    page = login(member).get(reverse("jobs:workload-detail", args=[urgent.pk])).content.decode()
    assert "By the portal's estimate it is <strong>number 1</strong>" in page
    assert "does not serve Kueue's queue positions" in page and "next in line" not in page


def test_the_estimated_start_is_when_running_jobs_reach_their_maximum_run_time(queue, member):
    running, older, urgent = queue
    started = timezone.now() - dt.timedelta(hours=1)
    RunInterval.objects.filter(workload=running).update(started_at=started)
    max_runtime = running.template_version.max_runtime_seconds

    answer = selectors.why_waiting(workload=Workload.objects.get(pk=older.pk))

    assert answer.estimated_start == started + dt.timedelta(seconds=max_runtime)
    assert "maximum run time" in answer.estimate_basis
    page = login(member).get(reverse("jobs:workload-detail", args=[older.pk])).content.decode()
    assert "<strong>Estimated start</strong> (an estimate)" in page


def test_no_start_is_estimated_when_running_jobs_would_not_free_enough(queue):
    running, older, urgent = queue
    usage = selectors.team_queue_usage(team=older.team, flavor=older.flavor)

    start, basis = selectors.estimated_start(workload=older, ahead=[running] * 5, usage=usage, lendable=0)

    assert start is None
    assert basis.startswith("It needs 22 more units of H100 80GB than are free now")
