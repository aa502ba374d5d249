"""Workloads on both clusters, with the same assertions: every kind is accepted by the API
server and Kueue, a training job runs to success with its run interval recorded, an over-quota
launch waits with its reason, borrowing and preemption show in the portal, stopping removes
every object, and re-reading the cluster never loses or duplicates an interval."""

from __future__ import annotations

import datetime as dt
import math
import time
from fractions import Fraction
from typing import Any

import pytest

from billing.models import Rate
from billing.money import round_money
from billing.usage.workloads import workload_costs
from jobs import kinds, manifests, selectors, services, sync
from jobs.models import RunInterval, RunIntervalSwitch, Workload
from portal.kube import ObjectRef, gateway, ref_of
from tenants import services as tenant_services
from tenants.models import Membership
from tests.contract.scenarios import HOLD, KUEUE_KINDS, QUICK, launch, metered, phase_of, pods_of, running
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

def objects_of(workload: Workload) -> list[dict[str, Any]]:
    wanted = kinds.workload_objects(spec=services.workload_spec(workload))
    return [o for o in (gateway().get(ref_of(obj)) for obj in wanted) if o]


@pytest.mark.parametrize("kind", KUEUE_KINDS)
def test_every_kind_is_accepted_and_runs_on_a_node_of_its_flavor(cluster, site, templates, kind, settings,
                                                                 django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("kinds", gpus=4)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates[kind], site.flavor, django_capture_on_commit_callbacks, units=1)
    assert workload.phase == Workload.Phase.QUEUED, workload.reason
    assert len(objects_of(workload)) == len(kinds.workload_objects(spec=services.workload_spec(workload)))

    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.RUNNING, what=f"the {kind} workload to run")

    def admitted_pods() -> list[dict[str, Any]]:
        # A server is Running with one replica up; Kueue may not have admitted the other yet, and a
        # pod it still gates has no node selector until it does (a CI run caught one so).
        pods = gateway().list("v1", "Pod", namespace=team.slug, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
        return [] if any(p["spec"].get("schedulingGates") for p in pods) else pods

    pods = cluster.wait_for(admitted_pods, what=f"Kueue to admit every pod of the {kind} workload")
    assert pods and all(p["spec"]["nodeSelector"] == site.flavor.node_labels for p in pods)
    assert all(not p["spec"]["automountServiceAccountToken"] for p in pods)


def test_a_training_job_runs_to_success_and_its_interval_is_recorded_once(cluster, site, templates, settings,
                                                                         django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    team = site.team("train", gpus=2)
    workload = launch(team, team.memberships.get().user, templates["training"], site.flavor, django_capture_on_commit_callbacks,
                      units=2)

    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.SUCCEEDED, what="the training job to succeed", timeout=90)
    for _ in range(3):
        sync.sync_all()  # a restarted sync reads the same cluster again
    (interval,) = RunInterval.objects.filter(workload=workload)
    assert (interval.units, interval.resource_name) == (2, "nvidia.com/gpu")
    assert interval.ended_at is not None and interval.ended_at >= interval.started_at
    assert [t.phase for t in workload.transitions.all()][-1] == Workload.Phase.SUCCEEDED


def test_a_finished_job_gives_its_quota_back_to_the_next_one(cluster, site, templates, settings,
                                                            django_capture_on_commit_callbacks):
    # Kueue releases a workload's quota when it finishes: the next launch of the same size is
    # admitted on the same guarantee, however many ran before it.
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    team = site.team("again", gpus=2)
    member = team.memberships.get().user
    for round_ in range(2):
        workload = launch(team, member, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2)
        cluster.wait_for(lambda w=workload: phase_of(w) == Workload.Phase.SUCCEEDED,
                         what=f"training run {round_ + 1} on the whole guarantee to succeed", timeout=90)


def test_an_over_quota_launch_waits_and_says_why(cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("small", gpus=1)
    team.may_borrow = False
    team.save()
    from tenants import reconcile

    reconcile.team_reconcile(team_id=team.pk)
    lead = team.memberships.get().user
    first = launch(team, lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: phase_of(first) == Workload.Phase.RUNNING, what="the first job to run")
    second = launch(team, lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=1)

    cluster.wait_for(lambda: phase_of(second) == Workload.Phase.QUEUED and "Waiting for quota" in second.reason,
                     what="the second job to wait for quota")
    assert "1 unit short" in second.reason and "couldn't assign" not in second.reason
    # Kueue orders jobs of one priority by creation time, which the API server keeps in whole
    # seconds: two jobs created in the same second have no defined order. Launch the third in a
    # later second than the second was submitted, as any two clicks by a person are.
    assert second.submitted_at is not None
    submitted = second.submitted_at.timestamp()
    cluster.wait_for(lambda: time.time() >= math.floor(submitted) + 1, what="the next second")
    third = launch(team, lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=1)

    # Both clusters serve Kueue's visibility API (the harness registers its APIService): the
    # place in the queue is Kueue's, not the portal's guess.
    # The holders come from the ClusterQueue's status, which Kueue writes a moment after it admits:
    # wait for both, as a person reloading the page would see them.
    def kueues_answer() -> Any:
        answer = selectors.why_waiting(workload=Workload.objects.get(pk=third.pk))
        held = any(h.team == team.name for h in answer.holders)
        return answer if answer.position_source == "kueue" and held else None

    answer = cluster.wait_for(kueues_answer, what="Kueue's visibility API to list the third job")
    assert (answer.position, [w.pk for w in answer.ahead]) == (2, [second.pk])
    assert [(h.team, h.in_use) for h in answer.holders if h.team == team.name] == [(team.name, 1)]


def test_borrowing_and_preemption_show_in_the_portal_and_borrowed_hours_bill_at_the_discount(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    # Price for risk: the flavor's price takes half off borrowed hours (a test's rate, from the past).
    Rate.objects.filter(flavor=site.flavor).update(borrowed_discount_percent=50)
    vision = site.team("vision", gpus=2)
    speech = site.team("speech", gpus=2)
    vision_lead, speech_lead = vision.memberships.get().user, speech.memberships.get().user
    own = launch(vision, vision_lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: phase_of(own) == Workload.Phase.RUNNING, what="vision's own job to run")
    borrowed = launch(vision, vision_lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2,
                      priority="low")
    cluster.wait_for(lambda: phase_of(borrowed) == Workload.Phase.RUNNING, what="vision's second job to borrow")
    own.refresh_from_db()
    assert (own.on_borrowed, borrowed.on_borrowed) == (False, True)
    # The borrowed pod runs whole seconds before speech reclaims (CI once preempted it within the
    # second it started, so its whole seconds, and the sum below, were 0).
    cluster.wait_for(lambda: borrowed_for(borrowed) >= 2, what="the borrowed pod to run two seconds")

    reclaim = launch(speech, speech_lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: phase_of(reclaim) == Workload.Phase.RUNNING, what="speech to take its quota back")
    cluster.wait_for(lambda: phase_of(borrowed) == Workload.Phase.PREEMPTED, what="the borrower to show as preempted")
    assert "Preempted" in borrowed.reason
    assert phase_of(own) == Workload.Phase.RUNNING

    # Billing, from metering's own rows: an auditor's sum of the intervals' whole seconds, each
    # workload's at the full price or, borrowed, at half of it (1.00 a GPU-hour, 2 GPUs each).
    cluster.wait_for(lambda: RunInterval.objects.filter(workload=borrowed, ended_at__isnull=False).exists()
                     and not RunInterval.objects.filter(workload=borrowed, ended_at__isnull=True).exists(),
                     what="the preempted pod's interval to end")
    intervals = list(RunInterval.objects.filter(workload__in=[own, borrowed]))
    # A minute after the preempted pod ended, by the cluster's clock (the simulated one runs ahead).
    until = max(i.ended_at for i in intervals if i.ended_at).replace(microsecond=0) + dt.timedelta(minutes=1)
    assert not RunIntervalSwitch.objects.filter(interval__in=intervals).exists()
    assert {(i.workload_id, i.borrowed) for i in intervals} == {(own.pk, False), (borrowed.pk, True)}

    def seconds(interval: RunInterval) -> int:
        return int((interval.ended_at or until).timestamp()) - int(interval.started_at.timestamp())

    exact = sum(Fraction(seconds(i) * i.units, 3600) * (Fraction(1, 2) if i.borrowed else 1) for i in intervals)
    lines, rows = metered(vision, start=min(i.started_at for i in intervals), until=until)
    assert sum(row["unit_seconds"] for row in rows if row["borrowed"]) == sum(
        seconds(i) * i.units for i in intervals if i.borrowed) > 0
    assert lines.total().cost == round_money(exact, "USD")
    cost = workload_costs(workload_ids=[borrowed.pk])[borrowed.pk]
    assert cost.cost == round_money(sum(Fraction(seconds(i) * i.units, 7200) for i in intervals if i.borrowed), "USD")


def borrowed_for(workload: Workload) -> int:
    """Whole seconds the workload's open interval has run, by the cluster's clock (0 before it opens)."""
    sync.sync_all()
    interval = RunInterval.objects.filter(workload=workload, ended_at__isnull=True).first()
    if interval is None:
        return 0
    return int(gateway().cluster_now().timestamp()) - int(interval.started_at.timestamp())


def test_a_person_over_their_limit_waits_in_the_portal_while_a_teammate_under_it_is_admitted(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    # Fairness inside a team (issue 27 §3): 4 GPUs guaranteed, each person at most 2 at once.
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = site.team("fair", gpus=4)
    lead = team.memberships.get().user
    teammate = UserFactory(username=cluster.unique("fair-member"))
    MembershipFactory(team=team, user=teammate, role=Membership.Role.MEMBER)
    with capture(execute=True):
        team = tenant_services.team_update(actor=lead, team=team, person_gpu_limit="2")
    training = templates["training"]
    first = launch(team, lead, training, site.flavor, capture, units=2)
    cluster.wait_for(lambda: running(first), what="her first workload to run on 2 GPUs")

    over = launch(team, lead, training, site.flavor, capture, units=1)
    assert over.phase == Workload.Phase.QUEUED and over.waits_for_person_limit, over.reason
    theirs = launch(team, teammate, training, site.flavor, capture, units=1)
    cluster.wait_for(lambda: running(theirs), what="the teammate under the limit to be admitted and run")
    # Her third GPU waits with nothing in the cluster, though the team has one free.
    assert phase_of(over) == Workload.Phase.QUEUED and over.waits_for_person_limit
    assert not objects_of(over) and not pods_of(over)

    with capture(execute=True):
        services.workload_stop(user=lead, workload=first)
    cluster.wait_for(lambda: running(over), what="her waiting workload to run once her own work ended")
    over.refresh_from_db()
    assert not over.waits_for_person_limit
    assert [phase for phase, _ in over.transitions.values_list("phase", "reason")][:3] == [
        Workload.Phase.SUBMITTING, Workload.Phase.QUEUED, Workload.Phase.SUBMITTING]


def test_stopping_removes_every_object_and_ends_the_interval(cluster, site, templates, settings,
                                                             django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("stop", gpus=4)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates["distributed"], site.flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.RUNNING, what="the distributed job to run")
    # RUNNING may be seen with one worker's pod started: the other's interval comes with a later sync.
    cluster.wait_for(lambda: phase_of(workload) and RunInterval.objects.filter(workload=workload).count() == 2,
                     what="two workers' intervals")

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)

    assert objects_of(workload) == []
    cluster.wait_for(lambda: not gateway().list("v1", "Pod", namespace=team.slug,
                                                labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0],
                     what="the workers' pods to go")
    sync.sync_all()
    assert RunInterval.objects.filter(workload=workload, ended_at__isnull=True).count() == 0
    assert RunInterval.objects.filter(workload=workload).count() == 2
    assert gateway().get(ObjectRef("v1", "Service", workload.k8s_name, team.slug)) is None
