"""Fairness inside a team: how many GPUs one person's workloads may hold in the cluster at once
(the lead's choice: `Team.person_gpu_limit` GPUs, or `person_share_percent` of the team's guaranteed
GPUs, the smaller where both; `tenants.selectors.person_gpu_cap`), so one person's burst cannot
take the team's whole guarantee while teammates wait behind it.

A launch that would take its owner over the limit is recorded and queued in the portal, not sent
to the cluster: no queue backend counts per person (Kueue's and Volcano's quotas are per team), so
the portal keeps that line itself. When the owner's own work ends (a final phase) or the lead
raises or lifts the limit, `jobs.services.person_limit_release` sends the owner's waiting
workloads, oldest first, as far as the limit allows. A teammate under the limit is never held.

A person's GPUs are physical GPUs: units × workers × the flavor's fraction (a 1/7 slice counts 1/7);
CPU-only flavors hold none. What counts is every active workload of theirs in the team that the
portal sent to the cluster (submitting, queued there, admitted, running, or preempted and queued
again), not those still waiting here."""

from __future__ import annotations

from fractions import Fraction

from django.db.models import Count

from jobs.models import Workload
from portal.models import User
from portal.tasks import send_on_commit
from tenants.models import Flavor, Team
from tenants.selectors import PersonCap, gpus_shown, person_gpu_cap


def gpus(*, flavor: Flavor, units: int, workers: int = 1) -> Fraction:
    """Physical GPUs that many units of the flavor hold (none on a CPU-only flavor)."""
    return Fraction(units * workers * flavor.fraction_numerator, flavor.fraction_denominator)


shown = gpus_shown  # GPUs as the pages say them: 2, 1.5, 0.43


def in_cluster(*, team: Team, owner: User, besides: Workload | None = None) -> Fraction:
    """The GPUs the owner's workloads in the team hold or wait for in the cluster now (but for `besides`)."""
    return held_by_owner(team=team, owner=owner, besides=besides).get(owner.pk, Fraction(0))


def held_by_owner(*, team: Team, owner: User | None = None, besides: Workload | None = None) -> dict[int, Fraction]:
    """Per owner's user id (of one owner, when given): the GPUs their workloads in the team hold or
    wait for in the cluster now, but for `besides`. One query, whatever the number of owners."""
    active = Workload.objects.filter(team=team, phase__in=Workload.ACTIVE_PHASES, waits_for_person_limit=False)
    if owner is not None:
        active = active.filter(owner=owner)
    if besides is not None:
        active = active.exclude(pk=besides.pk)
    held: dict[int, Fraction] = {}
    for owner_id, units, workers, numerator, denominator in active.values_list(
            "owner_id", "units", "workers", "flavor__fraction_numerator", "flavor__fraction_denominator"):
        held[owner_id] = held.get(owner_id, Fraction(0)) + Fraction(units * workers * numerator, denominator)
    return held


def by_person(*, team: Team) -> dict[int, tuple[str, int]]:
    """Per user id: the GPUs their workloads in the team hold in the cluster (as shown), and how
    many of theirs wait in the portal for the cap. Two queries, whatever the number of members."""
    held = held_by_owner(team=team)
    waiting = dict(Workload.objects.filter(team=team, waits_for_person_limit=True, phase=Workload.Phase.QUEUED)
                   .values("owner_id").annotate(n=Count("pk")).order_by().values_list("owner_id", "n"))
    return {owner_id: (shown(held.get(owner_id, Fraction(0))), waiting.get(owner_id, 0))
            for owner_id in {*held, *waiting}}


def too_big(*, team: Team, flavor: Flavor, units: int, workers: int, asking: str = "this launch asks") -> str:
    """Why a launch can never start under the team's per-person limit (it alone asks more), or ""."""
    cap = None if flavor.is_cpu else person_gpu_cap(team=team)
    if cap is None:
        return ""
    asked = gpus(flavor=flavor, units=units, workers=workers)
    if asked <= cap.gpus:
        return ""
    return (f"{team.name} lets each person hold at most {cap.words} at once, and {asking} {shown(asked)}, so it "
            f"could never start. Launch fewer units, or ask a lead of {team.slug} to raise the limit.")


def waiting_words(*, team: Team, cap: PersonCap, held: Fraction, earlier: bool, would: bool = False) -> str:
    """Why a workload waits in the portal (or, for the launch form, would), with the numbers at the time."""
    first = (f"{'Would wait' if would else 'Waiting'} in the portal for your per-person limit: {team.name} lets each "
             f"person hold {cap.words} at once, and your workloads in the cluster hold {shown(held)}.")
    then = (" Your earlier workloads waiting for it go first." if earlier else "")
    return f"{first}{then} It goes to the cluster, oldest first, as your own work there ends."


def waiting_now(workload: Workload) -> str:
    """Why a workload waiting for its owner's limit still waits, with today's numbers."""
    team = workload.team
    cap = person_gpu_cap(team=team)
    if cap is None:
        return "Its per-person limit was lifted: it goes to the cluster at the next pass (within a minute)."
    earlier = Workload.objects.filter(team=team, owner_id=workload.owner_id, waits_for_person_limit=True,
                                      phase=Workload.Phase.QUEUED, created_at__lt=workload.created_at).exists()
    return waiting_words(team=team, cap=cap, held=in_cluster(team=team, owner=workload.owner), earlier=earlier)


def must_wait(*, team: Team, owner: User, flavor: Flavor, units: int, workers: int,
              launching: Workload | None = None, would: bool = False) -> str:
    """For a launch (`launching`, once recorded, the team's row locked by the caller): why it
    waits in the portal, or "" when it may go to the cluster now. Earlier workloads of the owner
    that wait for the limit go first."""
    cap = None if flavor.is_cpu else person_gpu_cap(team=team)
    if cap is None:
        return ""
    held = in_cluster(team=team, owner=owner, besides=launching)
    earlier = Workload.objects.filter(team=team, owner=owner, waits_for_person_limit=True,
                                      phase=Workload.Phase.QUEUED).exists()
    if not earlier and held + gpus(flavor=flavor, units=units, workers=workers) <= cap.gpus:
        return ""
    return waiting_words(team=team, cap=cap, held=held, earlier=earlier, would=would)


def scale_refusal(*, workload: Workload, replicas: int) -> str:
    """Why growing a server in the cluster to `replicas` would take its owner over the limit, or ""."""
    team = workload.team
    cap = None if workload.flavor.is_cpu else person_gpu_cap(team=team)
    if cap is None:
        return ""
    others = in_cluster(team=team, owner=workload.owner, besides=workload)
    wanted = gpus(flavor=workload.flavor, units=workload.units, workers=replicas)
    if others + wanted <= cap.gpus:
        return ""
    return (f"{replicas} replicas would hold {shown(wanted)} GPUs, and your other workloads in the cluster hold "
            f"{shown(others)}; {team.name} lets each person hold {cap.words} at once. Scale to fewer replicas, or stop "
            "other work first.")


def release_when_freed(workload: Workload) -> None:
    """Called when one of the owner's workloads ended: their waiting ones may go now (on commit)."""
    if Workload.objects.filter(team_id=workload.team_id, owner_id=workload.owner_id, waits_for_person_limit=True,
                               phase=Workload.Phase.QUEUED).exists():
        send_on_commit("jobs.tasks.person_limit_release", workload.team_id, workload.owner_id)
