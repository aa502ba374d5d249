"""A real watch expiry: the status sync's informer watches through the fault proxy an API server
that runs without its watch cache (`--watch-cache=false`, a second kube-apiserver on the suite's
etcd), so a watch resumed from a resourceVersion older than etcd's compaction gets 410 Gone from
the API server itself, not from a stand-in.

The Pod watch is ended early after its first event, the workload's pod runs to the end while the
informer is blind to pods (its Job and Kueue watches go on), etcd is compacted, and only then may
the watch resume: it meets 410, lists afresh, and the workload's run interval is recorded once,
neither lost nor doubled, and no verdict is taken from the stale pod cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client

from jobs import manifests
from jobs.models import RunInterval, Workload
from jobs.watch import WorkloadInformer
from portal.kube import gateway, reset_gateway
from portal.kube.kubernetes import KubernetesGateway
from tests.cluster.fault_proxy import FaultProxy
from tests.contract.conftest import ClusterUnderTest
from tests.contract.scenarios import QUICK, launch
from tests.helpers import wait_for

# The informer's watches run in threads with their own database connections: PostgreSQL.
pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

PODS = "/api/v1/pods"


@pytest.fixture
def uncached_apiserver(control_plane: Any) -> Iterator[str]:
    url = control_plane.start_apiserver_replica("--watch-cache=false")
    yield url
    control_plane.stop_apiserver_replica(url)


@pytest.fixture
def proxy(control_plane: Any, uncached_apiserver: str) -> Iterator[FaultProxy]:
    kubeconfig = yaml.safe_load(Path(control_plane.kubeconfig_path).read_text())
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    faulty = FaultProxy(uncached_apiserver, ca_file=Path(cluster["certificate-authority"]),
                        cert_file=Path(user["client-certificate"]), key_file=Path(user["client-key"]))
    yield faulty
    faulty.release_watch()
    faulty.close()


@pytest.fixture
def cluster(settings: Any, db: Any, control_plane: Any, proxy: FaultProxy) -> Iterator[ClusterUnderTest]:
    configuration = k8s_client.Configuration()
    configuration.host = proxy.url
    under_test = ClusterUnderTest("real, without a watch cache", KubernetesGateway(configuration), control_plane)
    settings.PORTAL_COHORT = under_test.unique("cohort")
    reset_gateway(under_test.gateway)
    yield under_test
    reset_gateway(None)


def _pods_of(workload: Workload) -> list[dict[str, Any]]:
    return gateway().list("v1", "Pod", namespace=workload.team.namespace,
                          labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]


def test_a_watch_resumed_after_etcd_compaction_gets_410_lists_afresh_and_records_the_interval_once(
        cluster, control_plane, proxy, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    team = site.team("expiry", gpus=1)
    # One watch round outlasts the test: the resumption is the gateway's, within a round.
    informer = WorkloadInformer(watch_seconds=90)
    worker = threading.Thread(target=informer.run, daemon=True)
    worker.start()
    try:
        wait_for(lambda: all(ready.is_set() for ready in informer.ready.values()), what="every kind listed once",
                 timeout=30)
        proxy.interrupt_watch(PODS)
        workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                          django_capture_on_commit_callbacks, units=1)
        wait_for(proxy.resume_held.is_set, what="the Pod watch ended early and its resumption held", timeout=60)

        # Blind to pods, the informer still hears the Job and Kueue: the pod runs to its end meanwhile.
        wait_for(lambda: [p["status"].get("phase") for p in _pods_of(workload)] == ["Succeeded"],
                 what="the pod to succeed in the cluster", timeout=60)
        time.sleep(1)  # let the Job's and Workload's events reach the informer before the pods do
        workload.refresh_from_db()
        assert workload.phase != Workload.Phase.FAILED, workload.reason
        control_plane.etcd_compact()
        proxy.release_watch()

        def recorded() -> bool:
            workload.refresh_from_db()
            return (workload.phase == Workload.Phase.SUCCEEDED
                    and RunInterval.objects.filter(workload=workload, ended_at__isnull=False).exists())

        wait_for(recorded, what="the workload succeeded with its interval, after the relist", timeout=60)
        time.sleep(1)  # room for a second, duplicated interval or transition to show up
    finally:
        informer.stop()
        proxy.release_watch()
        worker.join(timeout=10)
        # The watch threads end with their round; on a real cluster they hold no database connection.

    assert [seen for seen in proxy.log if seen.expired and PODS in seen.path], "the API server never answered 410"
    (interval,) = RunInterval.objects.filter(workload=workload)
    assert interval.ended_at is not None and interval.ended_at >= interval.started_at
    phases = [t.phase for t in workload.transitions.all()]
    assert phases.count("succeeded") == 1 and "failed" not in phases, phases
