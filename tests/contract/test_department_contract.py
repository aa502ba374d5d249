"""Departments on the real Kueue and the simulated one (issue 27 §1): a department's teams share
their idle guarantees among themselves first, lend nothing outside when it says so, and borrow from
outside only up to its limit. Asserted as a member sees it: how many of a team's workloads run, and
that the rest wait for quota."""

from __future__ import annotations

import pytest

from jobs import services as job_services
from jobs.models import Workload
from tenants import services as tenant_services
from tenants.models import Department
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, launch, queue_usage, queued_for_quota, running

pytestmark = pytest.mark.django_db

cluster = clusters("simulated", "real")


def test_a_departments_teams_borrow_from_each_other_first_and_its_limits_hold(cluster, site, templates, settings,
                                                                                django_capture_on_commit_callbacks):
    """Research (A and B, 2 GPUs each) lends nothing outside and borrows at most 1 GPU from outside;
    C, outside, has 2. C cannot take Research's 4 idle GPUs; A runs on its own 2, B's 2 and 1 of C's,
    and its sixth waits though C leaves one more idle."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    a, b, c = site.team("dept-a", gpus=2), site.team("dept-b", gpus=2), site.team("outside", gpus=2)
    with capture(execute=True):
        research = tenant_services.department_save(actor=site.admin, department=Department(
            name=cluster.unique("Research"), slug=cluster.unique("research"), borrowing_limit=1, lending_limit=0))
        for team in (a, b):
            tenant_services.team_update(actor=site.admin, team=team, department=research)
    training = templates["training"]

    outsiders = [launch(c, c.memberships.get().user, training, site.flavor, capture, units=1) for _ in range(3)]
    cluster.wait_for(lambda: sum(running(w) for w in outsiders) == 2 and sum(queued_for_quota(w) for w in outsiders) == 1,
                     what="the outside team to run 2 on its own 2 GPUs and the other to wait: Research lends nothing")
    for workload in outsiders:
        with capture(execute=True):
            job_services.workload_stop(user=workload.owner, workload=workload)

    lead = a.memberships.get().user
    inside = [launch(a, lead, training, site.flavor, capture, units=1) for _ in range(6)]
    cluster.wait_for(lambda: sum(running(w) for w in inside) == 5 and sum(queued_for_quota(w) for w in inside) == 1,
                     what="A to run 5 (its 2, B's idle 2, 1 from outside) and its sixth to wait at the borrowing limit",
                     timeout=120)
    # The team's page reads it from its queue, as for a team in no department: 5 in use, 3 borrowed.
    cluster.wait_for(lambda: queue_usage(a.slug, site.flavor.slug) == (5, 3),
                     what="A's queue to report 5 GPUs in use, 3 of them borrowed")


def test_a_departments_pool_runs_its_teams_work_as_borrowed_and_no_one_outside_uses_it(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    """Research pools 2 GPUs, lends nothing outside and borrows nothing from outside; its team A has
    no guarantee of its own, C outside has 1. C's second waits though the pool is idle; A runs 2 on
    the pool (borrowed, for A: billed at the borrowed price) and its third waits."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    a, c = site.team("pool-a"), site.team("pool-outside", gpus=1)
    with capture(execute=True):
        research = tenant_services.department_save(
            actor=site.admin, department=Department(name=cluster.unique("Pooled"), slug=cluster.unique("pooled"),
                                                    borrowing_limit=0, lending_limit=0), pool={site.flavor: 2})
        tenant_services.team_update(actor=site.admin, team=a, department=research)
    training = templates["training"]

    outsiders = [launch(c, c.memberships.get().user, training, site.flavor, capture, units=1) for _ in range(2)]
    # Launched in the same second, either may be the one admitted (Kueue breaks the tie by uid): count them.
    cluster.wait_for(lambda: sum(running(w) for w in outsiders) == 1 and sum(queued_for_quota(w) for w in outsiders) == 1,
                     what="the outside team to run one on its own GPU and the other to wait: the pool is Research's")
    for workload in outsiders:
        with capture(execute=True):
            job_services.workload_stop(user=workload.owner, workload=workload)

    lead = a.memberships.get().user
    inside = [launch(a, lead, training, site.flavor, capture, units=1) for _ in range(3)]
    cluster.wait_for(lambda: sum(running(w) for w in inside) == 2 and sum(queued_for_quota(w) for w in inside) == 1,
                     what="A to run 2 on Research's pool and its third to wait: the pool holds 2", timeout=120)
    for workload in inside:
        workload.refresh_from_db()
        assert workload.on_borrowed == (workload.phase == Workload.Phase.RUNNING), (
            "work on the department's pool is beyond the team's own guarantee: borrowed")
    cluster.wait_for(lambda: queue_usage(a.slug, site.flavor.slug) == (2, 2),
                     what="A's queue to report 2 GPUs in use, both borrowed from the pool")
