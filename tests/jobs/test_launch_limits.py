"""Limits on launching: a team's active workloads, and each user's launches per minute."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Workload
from portal.errors import DomainError
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

BODY = {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb"}


def test_a_team_at_its_workload_limit_is_refused_the_next_launch_in_words(
    ready_team, member, training, flavor, settings
):
    settings.PORTAL_TEAM_MAX_WORKLOADS = 2
    launch(member, ready_team, training, flavor)
    launch(member, ready_team, training, flavor)

    with pytest.raises(DomainError) as refused:
        launch(member, ready_team, training, flavor)

    assert refused.value.message == (
        "vision already has 2 active workloads, the most a team may have at once; stop one before launching another.")
    assert Workload.objects.filter(team=ready_team).count() == 2


def test_a_stopped_workload_frees_its_place_under_the_team_limit(ready_team, member, training, flavor, settings):
    from jobs import services

    settings.PORTAL_TEAM_MAX_WORKLOADS = 1
    first = launch(member, ready_team, training, flavor)
    services.workload_stop(user=member, workload=first)

    assert launch(member, ready_team, training, flavor).pk != first.pk


def test_the_api_answers_429_with_retry_after_once_a_user_is_over_the_launch_rate(
    ready_team, member, training, settings, clock
):
    settings.PORTAL_LAUNCH_RATE = (2, 60)
    clock[0] += 20
    client = api(member)
    assert [client.post("/api/workloads/", BODY, format="json").status_code for _ in range(2)] == [201, 201]

    refused = client.post("/api/workloads/", BODY, format="json")

    assert refused.status_code == 429
    assert refused["Retry-After"] == "40"
    assert refused.json()["message"] == (
        "You may launch 2 workloads a minute and have reached that; try again in 40 seconds.")
    assert Workload.objects.count() == 2


def test_the_launch_rate_is_per_user_and_opens_again_in_the_next_window(
    ready_team, member, lead, training, settings, clock
):
    settings.PORTAL_LAUNCH_RATE = (1, 60)
    assert api(member).post("/api/workloads/", BODY, format="json").status_code == 201
    assert api(member).post("/api/workloads/", BODY, format="json").status_code == 429
    assert api(lead).post("/api/workloads/", BODY, format="json").status_code == 201

    clock[0] += 60

    assert api(member).post("/api/workloads/", BODY, format="json").status_code == 201


def test_a_refused_launch_does_not_count_against_the_rate(ready_team, member, training, settings, clock):
    settings.PORTAL_LAUNCH_RATE = (1, 60)
    assert api(member).post("/api/workloads/", {**BODY, "units": 99}, format="json").status_code == 400

    assert api(member).post("/api/workloads/", BODY, format="json").status_code == 201


def test_relaunching_counts_against_the_same_rate(ready_team, member, training, settings, clock):
    settings.PORTAL_LAUNCH_RATE = (1, 60)
    created = api(member).post("/api/workloads/", BODY, format="json").json()

    refused = api(member).post(f"/api/workloads/{created['id']}/relaunch/", format="json")

    assert refused.status_code == 429
    assert "try again in 1 minute" in refused.json()["message"]


def test_the_launch_page_shows_the_rate_sentence(ready_team, member, training, flavor, settings, clock, as_user):
    settings.PORTAL_LAUNCH_RATE = (1, 60)
    launch(member, ready_team, training, flavor)
    form = {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "units": "1", "cpu": "4",
            "memory_gib": "16", "priority": "normal", "p_epochs": "3", "p_learning_rate": "0.01", "p_image_tag": "2.4"}

    page = as_user(member).post(reverse("jobs:workload-launch"), form)

    assert page.status_code == 200
    assert "and have reached that; try again in 1 minute." in page.content.decode()
    assert Workload.objects.count() == 1


def test_a_rate_in_words_that_is_not_a_rate_stops_the_portal_from_starting(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from portal import configuration

    monkeypatch.setenv("PORTAL_LAUNCH_RATE", "lots")
    with pytest.raises(ImproperlyConfigured, match='PORTAL_LAUNCH_RATE must be a count per second, minute, hour or day'):
        configuration.rate("PORTAL_LAUNCH_RATE")
    monkeypatch.setenv("PORTAL_LAUNCH_RATE", "5/hours")
    assert configuration.rate("PORTAL_LAUNCH_RATE") == (5, 3600)
