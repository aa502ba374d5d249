"""Fairness between the people of a team on the real Kueue and the simulated one (issue 27 §3):
each member queues through a LocalQueue of their own, and the team's ClusterQueue admits first
the waiting work of whoever used least lately (Kueue's admission fair sharing). Asserted as the
members see it: which of their workloads runs once a GPU frees."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs import selectors as job_selectors
from jobs import services as job_services
from jobs.models import Workload
from portal.kube import ObjectRef, gateway
from tenants import services as tenant_services
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, launch, phase_of, running, workload_of
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

cluster = clusters("simulated", "real")


def in_kueue(workload: Workload) -> bool:
    """Queued, and Kueue has made its Workload. Kueue may not have tried it yet: under load the
    real one said nothing of the lead's second while the first lacked quota."""
    return phase_of(workload) == Workload.Phase.QUEUED and workload_of(workload.team.namespace, workload.k8s_name) is not None


def test_a_persons_burst_waits_behind_a_teammate_who_used_less_lately(cluster, site, templates, settings,
                                                                       django_capture_on_commit_callbacks):
    """The team holds 2 GPUs. Its lead runs two trainings and queues two more; a teammate who ran
    nothing queues one after them. When one of the lead's ends, the teammate's goes first, though
    the lead's two waited longer: by age alone (without admission fair sharing) the lead's oldest
    would run."""
    capture = django_capture_on_commit_callbacks
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("burst", gpus=2)
    lead, training = team.memberships.get().user, templates["training"]
    teammate = UserFactory.create(username=cluster.unique("quiet"))
    with capture(execute=True):
        tenant_services.membership_add(actor=site.admin, team=team, user=teammate)
    own_queue = ObjectRef("kueue.x-k8s.io/v1beta2", "LocalQueue", f"person-{teammate.pk}", team.namespace)
    cluster.wait_for(lambda: gateway().get(own_queue), what="the teammate's own LocalQueue")

    first = [launch(team, lead, training, site.flavor, capture, units=1) for _ in range(2)]
    cluster.wait_for(lambda: all(running(w) for w in first), what="the lead's first two trainings to run")
    burst = [launch(team, lead, training, site.flavor, capture, units=1) for _ in range(2)]
    cluster.wait_for(lambda: all(in_kueue(w) for w in burst), what="the lead's next two to wait in Kueue's queue")
    # Kueue orders by creation to the second, and a tie by uid: the teammate's comes a second later,
    # so by age alone it is last.
    queued = max(dt.datetime.fromisoformat((workload_of(team.namespace, w.k8s_name) or {})["metadata"]["creationTimestamp"]
                                           .replace("Z", "+00:00")) for w in burst)
    cluster.wait_for(lambda: gateway().cluster_now() >= queued + dt.timedelta(seconds=1),
                     what="a second to pass since the lead's last was queued")
    theirs = launch(team, teammate, training, site.flavor, capture, units=1)
    cluster.wait_for(lambda: in_kueue(theirs), what="the teammate's training to wait in Kueue's queue")
    assert [w.queue_name for w in (*first, theirs)] == [f"person-{lead.pk}"] * 2 + [f"person-{teammate.pk}"]

    # Kueue's own order already puts it first: the place in line the portal shows.
    cluster.wait_for(lambda: job_selectors.why_waiting(workload=theirs).position == 1,
                     what="the teammate's training to be first in line, ahead of the lead's older two")

    # Why-waiting says so: the lead's next waits behind the teammate's (the figures are Kueue's
    # last sample of each LocalQueue, so not asserted here).
    said = job_selectors.why_waiting(workload=burst[0]).order
    assert said.startswith("Kueue admits the team's waiting work by each person's recent use, least first"), said
    assert f"{lead.username}'s recent use: " in said and f"Ahead of it: {teammate.username}'s (" in said, said

    with capture(execute=True):
        job_services.workload_stop(user=lead, workload=first[0])
    cluster.wait_for(lambda: running(theirs), what="the teammate's training to take the freed GPU")
    assert all(in_kueue(w) for w in burst), [w.reason for w in burst]
    assert running(first[1])
