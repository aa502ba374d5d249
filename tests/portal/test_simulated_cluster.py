"""The simulated cluster's own promises: watch streams that interleave as the seed says and keep
each kind's order, the hooks the portal calls on any cluster, and counting by the wrapper."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from portal.kube import NodeSpec, ObjectRef, reset_gateway
from portal.kube.counting import CountingGateway
from portal.kube.kubernetes import KubernetesGateway
from portal.kube.simulated import SimulatedGateway
from portal.kube.simulated.apiserver import WATCH_DELAY_MAX_SECONDS, watch_delays
from tenants import reconcile
from tests.factories import FlavorFactory, TeamFactory


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def quota(name: str, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {"pods": "10"}}}


def first_delay(seed: str, kind: str) -> float:
    return next(watch_delays(seed, "v1", kind))


def test_a_watch_streams_delays_are_the_same_for_the_same_seed_and_kind_and_stay_small():
    again = list(itertools.islice(watch_delays("7", "v1", "Pod"), 50))

    assert list(itertools.islice(watch_delays("7", "v1", "Pod"), 50)) == again
    assert list(itertools.islice(watch_delays("7", "batch/v1", "Job"), 50)) != again
    assert list(itertools.islice(watch_delays("8", "v1", "Pod"), 50)) != again
    assert all(0 <= delay <= WATCH_DELAY_MAX_SECONDS for delay in again)


@pytest.mark.django_db
def test_a_simulated_watch_delivers_one_kinds_changes_in_the_order_they_happened():
    cluster = SimulatedGateway(watch_seed="3")
    cluster.apply(namespace("before"))  # so the version to watch from is a change the log still holds
    _, version = cluster.list("v1", "Namespace")
    names = [f"ns-{index}" for index in range(8)]
    for name in names:
        cluster.apply(namespace(name))
    cluster.delete(ObjectRef("v1", "Namespace", "ns-2"))

    started = time.monotonic()
    seen = []
    for event in cluster.watch("v1", "Namespace", resource_version=version, timeout_seconds=5):
        seen.append((event.type, event.object["metadata"]["name"]))
        if len(seen) == len(names) + 1:
            break
    elapsed = time.monotonic() - started

    assert seen == [("ADDED", name) for name in names] + [("DELETED", "ns-2")]
    # Held back, but by no more than the bound (plus the first poll), not by a whole watch timeout.
    assert elapsed < WATCH_DELAY_MAX_SECONDS + 0.5


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_two_kinds_changed_together_arrive_in_the_order_the_seed_decides():
    # Seeds whose first Namespace and ResourceQuota delays lie far apart, one each way round, so the
    # threads' own timing (milliseconds) cannot turn the order.
    seeds = [str(n) for n in range(200)]
    namespace_first = next(s for s in seeds if first_delay(s, "ResourceQuota") - first_delay(s, "Namespace") > 0.12)
    quota_first = next(s for s in seeds if first_delay(s, "Namespace") - first_delay(s, "ResourceQuota") > 0.12)

    def arrival_order(seed: str, suffix: str) -> list[str]:
        cluster = SimulatedGateway(watch_seed=seed)
        cluster.apply(namespace(f"before-{suffix}"))
        _, version = cluster.list("v1", "Namespace")
        cluster.apply(namespace(f"team-{suffix}"))
        cluster.apply(quota("quota", f"before-{suffix}"))
        arrivals: list[str] = []
        lock = threading.Lock()

        def follow(kind: str) -> None:
            try:
                # A deadline, not a measure: each thread returns at its event, and on a busy machine
                # (the full run under load) a two-second window ended before either came.
                for event in cluster.watch("v1", kind, resource_version=version, timeout_seconds=30):
                    if event.type == "ADDED" and event.object["metadata"]["name"] in (f"team-{suffix}", "quota"):
                        with lock:
                            arrivals.append(kind)
                        return
            finally:
                connection.close()  # each thread's own; the test database must not outlive it

        threads = [threading.Thread(target=follow, args=(kind,)) for kind in ("Namespace", "ResourceQuota")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=40)
        return arrivals

    assert arrival_order(namespace_first, "a") == ["Namespace", "ResourceQuota"]
    assert arrival_order(quota_first, "b") == ["ResourceQuota", "Namespace"]
    assert arrival_order(namespace_first, "c") == ["Namespace", "ResourceQuota"]


@pytest.mark.django_db
def test_the_simulated_cluster_makes_exactly_the_nodes_it_is_told_to_expect():
    cluster = SimulatedGateway()
    cluster.expect_nodes([NodeSpec(name="gpu-a", labels={"gpu": "h100"}, allocatable={"nvidia.com/gpu": 8}),
                          NodeSpec(name="gpu-b", labels={"gpu": "h100"}, allocatable={"nvidia.com/gpu": 4})])
    cluster.expect_nodes([NodeSpec(name="gpu-b", labels={"gpu": "a100"}, allocatable={"nvidia.com/mig-1g.10gb": 7},
                                   taints=[{"key": "gpu", "effect": "NoSchedule"}])])

    (node,) = cluster.list("v1", "Node")[0]
    assert node["metadata"]["name"] == "gpu-b"
    assert node["metadata"]["labels"]["gpu"] == "a100"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
    assert node["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]


@pytest.mark.django_db
def test_platform_reconcile_gives_the_simulated_cluster_the_catalogs_nodes(simulated):
    FlavorFactory(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=12, node_labels={"gpu": "h100"})

    reconcile.platform_reconcile()

    nodes = {n["metadata"]["name"]: n["status"]["allocatable"]["nvidia.com/gpu"] for n in simulated.list("v1", "Node")[0]}
    assert nodes == {"sim-h100-0": "8", "sim-h100-1": "4"}


def test_a_real_cluster_ignores_the_hooks_without_calling_its_api_server():
    from kubernetes import client as k8s_client

    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # nothing listens: any request would fail
    real = KubernetesGateway(configuration, max_attempts=1)

    # Both return without a request: one would raise KubeError, the API server did not answer.
    real.expect_nodes([NodeSpec(name="gpu-a", labels={}, allocatable={"nvidia.com/gpu": 8})])
    real.tick()


@pytest.mark.django_db
def test_the_counting_gateway_counts_each_call_by_method_and_kind_and_passes_it_through():
    counting = CountingGateway(SimulatedGateway())

    counting.apply(namespace("vision"))
    counting.apply(quota("quota", "vision"))
    counting.get(ObjectRef("v1", "Namespace", "vision"))
    items, _ = counting.list("v1", "ResourceQuota", namespace="vision")
    counting.tick()

    assert [item["metadata"]["name"] for item in items] == ["quota"]
    assert counting.calls == {"apply": 2, "get": 1, "list": 1, "tick": 1}
    assert counting.kinds[("apply", "ResourceQuota")] == 1
    assert counting.total == 4  # tick is no request to the API server
    assert counting.wait_for_calls("list", "ResourceQuota", at_least=1, timeout=0)
    assert not counting.wait_for_calls("list", "ResourceQuota", at_least=2, timeout=0.05)


@pytest.mark.django_db
def test_the_periodic_pass_reports_as_reads_the_lists_it_made():
    counting = CountingGateway(SimulatedGateway())
    reset_gateway(counting)
    try:
        TeamFactory(slug="vision", name="Vision")
        reconcile.platform_reconcile()
        before = counting.calls["list"]

        result = reconcile.cluster_reconcile()

        assert result.reads == counting.calls["list"] - before == len(reconcile.owned_kinds())
    finally:
        reset_gateway(None)


def test_a_site_on_a_real_cluster_has_no_simulator_app_and_no_migration_missing(tmp_path):
    env = {**os.environ, "PORTAL_CLUSTER": "kubernetes", "PORTAL_VAR_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    env.pop("DATABASE_URL", None)
    root = Path(__file__).resolve().parents[2]
    script = (
        "import django; django.setup()\n"
        "from django.apps import apps; from django.core.management import call_command\n"
        "print(apps.is_installed('portal.kube.simulated'))\n"
        "call_command('makemigrations', check=True, dry_run=True, verbosity=0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120,
                          check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
