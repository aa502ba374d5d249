"""Weights between teams on the real Kueue and the simulated one (issue 27 §2): two teams that
borrow a third team's idle GPUs share them by their fair-share weights. Asserted as the members
see it: how many of each team's workloads run, and that the rest wait for quota."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from jobs import selectors as job_selectors
from jobs.models import Workload
from tenants import cluster_selectors
from tenants import services as tenant_services
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, launch, phase_of, running

pytestmark = pytest.mark.django_db

cluster = clusters("simulated", "real")


def waits(workload: Workload) -> bool:
    """Waiting for quota, or preempted and queued again (and said to be)."""
    phase = phase_of(workload)
    return ((phase == Workload.Phase.QUEUED and workload.reason.startswith("Waiting"))
            or (phase == Workload.Phase.PREEMPTED and workload.reason.startswith("Preempted and queued again")))


def borrowers(site, settings, capture, *, lends: int, weights: dict[str, int]) -> list[Any]:
    """Teams with no guarantee of their own and the given weights, beside a lender whose `lends`
    GPUs stay idle; their pods keep running until stopped."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    teams = [site.team(name, gpus=0) for name in weights]
    site.team("lender", gpus=lends)
    with capture(execute=True):
        for team, weight in zip(teams, weights.values(), strict=True):
            tenant_services.team_update(actor=site.admin, team=team, fair_share_weight=Decimal(weight))
    return teams


def trainings(team, site, templates, capture, count: int) -> list[Workload]:
    return [launch(team, team.memberships.get().user, templates["training"], site.flavor, capture, units=1)
            for _ in range(count)]


def test_two_teams_borrowing_idle_gpus_converge_to_the_ratio_of_their_weights(cluster, site, templates, settings,
                                                                              django_capture_on_commit_callbacks):
    """C leaves its 8 GPUs idle. A (weight 1) borrows all 8 first; then B (weight 3) launches 8
    too. B takes GPUs back from A, as Kueue's fair sharing preempts the team holding more than its
    share, until they hold 2 and 6: the weights' 1:3. Each team's other workloads wait."""
    capture = django_capture_on_commit_callbacks
    a, b = borrowers(site, settings, capture, lends=8, weights={"light": 1, "heavy": 3})
    first = trainings(a, site, templates, capture, 8)
    cluster.wait_for(lambda: all(running(w) for w in first), what="A to borrow all 8 idle GPUs while B wants none",
                     timeout=120)

    second = trainings(b, site, templates, capture, 8)

    def shares() -> tuple[int, int, int, int]:
        return (sum(running(w) for w in first), sum(waits(w) for w in first),
                sum(running(w) for w in second), sum(waits(w) for w in second))

    cluster.wait_for(lambda: shares() == (2, 6, 6, 2),
                     what="A to run 2 and B 6 (weights 1:3), the other 6 of A's and 2 of B's waiting", timeout=180)

    # The team page reads the same from the queues: each holds its fair share of the 8 borrowed.
    def fair(team) -> tuple[int, int, str, bool]:
        (share,) = cluster_selectors.team_cluster_picture(team=team).fair_shares
        return share.pool, share.borrowed, share.fair_text, share.above

    cluster.wait_for(lambda: fair(a) == (8, 2, "2", False) and fair(b) == (8, 6, "6", False),
                     what="the team pages to show 2 of 8 and 6 of 8 borrowed, each its fair share")
    # Why one of A's waits: a third would put A above its fair share.
    waiting = next(w for w in first if waits(w))
    said = job_selectors.why_waiting(workload=waiting).fairness
    assert f"{a.name} borrows 2 (weight 1; its fair share 2)" in said, said
    assert f"{b.name} 6 (weight 3)" in said and "above its fair share" in said, said


def test_a_team_of_weight_zero_borrows_only_what_nobody_else_wants(cluster, site, templates, settings,
                                                                   django_capture_on_commit_callbacks):
    """A weight of 0 makes a team's share infinite as soon as it borrows: Z runs on the lender's idle
    GPUs while nobody else wants them, and gives every one of them back to W when W wants them."""
    capture = django_capture_on_commit_callbacks
    zero, wants = borrowers(site, settings, capture, lends=4, weights={"zero": 0, "wants": 1})
    idle = trainings(zero, site, templates, capture, 4)
    cluster.wait_for(lambda: all(running(w) for w in idle), what="Z to borrow the 4 idle GPUs nobody else wants")
    wanted = trainings(wants, site, templates, capture, 4)
    cluster.wait_for(lambda: all(running(w) for w in wanted) and all(waits(w) for w in idle),
                     what="W to take all 4 back from Z, whose weight is 0", timeout=120)
