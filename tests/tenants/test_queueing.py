"""The queue backend seam (tenants/queueing/): chosen by PORTAL_QUEUE_BACKEND, Kueue or Volcano."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from jobs import services
from tenants import desired, queueing
from tenants.manifests import FlavorSpec, PriorityTier, TeamSpec, TierName
from tenants.queueing.base import Admission, PendingEntry, QueueBackend, QueuedWorkload, QueueUsage
from tenants.queueing.kueue import KueueBackend
from tenants.queueing.volcano import VolcanoBackend
from tests.factories import TeamFactory
from tests.helpers import launch, make_ready

pytestmark = pytest.mark.django_db


def test_the_site_runs_kueue_unless_told_otherwise():
    assert isinstance(queueing.backend(), KueueBackend)


def test_a_queue_backend_the_portal_does_not_have_stops_the_start_with_a_sentence():
    assert isinstance(queueing.chosen("volcano"), VolcanoBackend)
    with pytest.raises(ImproperlyConfigured, match="PORTAL_QUEUE_BACKEND is “slurm”, which is not a queue backend the "
                                                   "portal has; set it to one of: kueue, volcano."):
        queueing.chosen("slurm")


def test_kueue_says_what_the_portal_says_of_a_workload_it_does_not_know_yet():
    assert KueueBackend().admission([]) == Admission(waiting="Waiting for Kueue to admit it",
                                                     starting="Admitted by Kueue; starting its pods")


class OtherQueue:
    """A second backend, as little as the interface asks: proves the portal asks it, not Kueue."""

    name = "other"
    label = "The other queue"
    position_words = "the other queue's order"
    platform_kinds: tuple[tuple[str, str], ...] = (("other.example.com/v1", "Tier"),)
    team_kinds: tuple[tuple[str, str], ...] = (("other.example.com/v1", "Queue"),)
    team_queue_kind: tuple[str, str] = ("other.example.com/v1", "Queue")
    workload_kinds: tuple[tuple[str, str], ...] = (("other.example.com/v1", "Group"),)
    flavor_alternatives = False
    departments = False
    fair_sharing = False
    people_ordered = False
    indexed_pod_name = "{name}-{index}"
    unseen = "Waiting for the other queue"

    def owner(self, built: tuple[str, str]) -> tuple[str, str]:
        return built

    def platform_objects(self, *, flavors: Sequence[FlavorSpec], tiers: Sequence[PriorityTier],
                         departments: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [{"apiVersion": "other.example.com/v1", "kind": "Tier", "metadata": {"name": tier.object_name}} for tier in tiers]

    def team_objects(self, *, team: TeamSpec) -> list[dict[str, Any]]:
        return [{"apiVersion": "other.example.com/v1", "kind": "Queue", "metadata": {"name": team.slug},
                 "spec": {"closed": team.held}}]

    def person_queue(self, user_id: int) -> str:
        return ""

    def workload_labels(self, *, priority: TierName, queue: str = "") -> dict[str, str]:
        return {"other.example.com/queue": "team", "other.example.com/tier": priority}

    def shape(self, objects: Sequence[dict[str, Any]], *, workload: QueuedWorkload) -> list[dict[str, Any]]:
        return list(objects)

    def admission(self, objects: Sequence[dict[str, Any]], *, per_unit: Mapping[str, int] | None = None) -> Admission:
        return Admission(waiting="Waiting for the other queue")

    def usage(self, *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
        return {}

    def pending(self, *, team_queue: str) -> list[PendingEntry] | None:
        return None

    def people_use(self, *, namespace: str) -> dict[str, float] | None:
        return {}


def _implements_the_interface(backend: OtherQueue) -> QueueBackend:
    return backend  # mypy checks here that the interface is all a backend needs


@pytest.fixture
def other_queue(monkeypatch: pytest.MonkeyPatch) -> Iterable[None]:
    monkeypatch.setitem(queueing.BACKENDS, "other", OtherQueue)
    with override_settings(PORTAL_QUEUE_BACKEND="other"):
        yield


def test_a_teams_queue_and_the_shared_objects_are_the_chosen_backends(other_queue):
    team = TeamFactory.create(slug="vision")
    _, spec = desired.team_specs([team.pk])[team.pk]
    objects = desired.team_objects(spec)
    assert objects[-1] == {"apiVersion": "other.example.com/v1", "kind": "Queue", "metadata": {"name": "vision"},
                           "spec": {"closed": False}}
    assert not [obj for obj in objects + desired.platform_objects() if obj["apiVersion"].startswith("kueue.")]
    assert [obj["kind"] for obj in desired.platform_objects()][:3] == ["Tier", "Tier", "Tier"]


def test_a_workloads_queued_object_carries_the_chosen_backends_labels(member, team, flavor, training, monkeypatch):
    make_ready(team, flavor)
    workload = launch(member, team, training, flavor)
    # Each person queues through their own LocalQueue in the team (admission fair sharing).
    assert services.workload_spec(workload).queue_labels["kueue.x-k8s.io/queue-name"] == f"person-{member.pk}"
    monkeypatch.setitem(queueing.BACKENDS, "other", OtherQueue)
    with override_settings(PORTAL_QUEUE_BACKEND="other"):
        labels = services.workload_spec(workload).queue_labels
    assert labels["other.example.com/tier"] == workload.priority
    assert not [key for key in labels if key.startswith("kueue.")]


def test_a_site_cannot_switch_its_queue_backend_while_workloads_run_on_the_old_one(member, team, flavor, training):
    """Each workload records the backend it was launched on. With one still active on Kueue, a
    site set to Volcano fails `manage.py check --database` and `migrate` (and so the chart's migrate
    job, before the release starts), in words; once it has ended, both pass."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from jobs import checks
    from jobs.models import Workload

    make_ready(team, flavor)
    running = launch(member, team, training, flavor)
    assert running.queue_backend == "kueue"
    with override_settings(PORTAL_QUEUE_BACKEND="volcano"):  # what any workload made then records, however made
        assert Workload().queue_backend == "volcano"
    Workload.objects.filter(pk=running.pk).update(phase=Workload.Phase.RUNNING)
    assert checks.switch_problem() == ""
    with override_settings(PORTAL_QUEUE_BACKEND="volcano"):
        assert checks.switch_problem() == (
            "PORTAL_QUEUE_BACKEND is “volcano”, but 1 workload launched on Kueue is still active. Drain them first "
            "(stop them, or let them finish) on the backend they run on, then switch.")
        with pytest.raises(SystemCheckError, match="jobs.E001"):
            call_command("check", "--database", "default")
        with pytest.raises(SystemCheckError, match="jobs.E001"):  # call_command skips checks unless told, as manage.py does not
            call_command("migrate", "--check", skip_checks=False)
        Workload.objects.filter(pk=running.pk).update(phase=Workload.Phase.SUCCEEDED)
        assert checks.switch_problem() == ""
        call_command("check", "--database", "default")
