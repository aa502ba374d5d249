"""Onboarding benchmark on the real control plane (tests/cluster), on Kueue and on Volcano side by side.

Provisions 100 teams with 3 flavors each through the portal's reconcile, then runs the
periodic pass with nothing to change, and measures in the same run the floor: a bare-client
server-side apply of the very same objects, and a bare list of every portal-owned object. Each
queue backend gets a control plane of its own (one after the other, each in a process of its own),
and each figure is a ratio to that run's floor.

    .venv/bin/python benchmarks/onboarding.py [--teams 100] [--queue-backend kueue|volcano]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.cluster.harness import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import QUEUE_BACKENDS, per_queue_backend, record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--queue-backend", choices=QUEUE_BACKENDS, help="only this one, printed and not recorded")
    args = parser.parse_args()
    if args.queue_backend:
        print(json.dumps(measure(args.teams, args.queue_backend)))  # one line, the last: the parent reads it
        return
    record("onboarding", per_queue_backend(__file__, ["--teams", str(args.teams)]))


def measure(team_count: int, backend: str) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="gpu-portal-bench-")
    os.environ.update({"PORTAL_VAR_DIR": workdir, "PORTAL_CLUSTER": "kubernetes", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "KUBE_QPS": "1000", "KUBE_BURST": "1000", "PORTAL_QUEUE_BACKEND": backend})
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)

    from tests.cluster.harness import ControlPlane, ensure_built

    with ControlPlane(ensure_built(), queue_backend=backend) as cp:
        os.environ["KUBECONFIG"] = str(cp.kubeconfig_path)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return run(cp, team_count)


def run(cp: ControlPlane, team_count: int) -> dict[str, Any]:
    from kubernetes import client as k8s

    from portal.kube import gateway, ref_of, reset_gateway
    from portal.kube.counting import CountingGateway
    from portal.kube.kubernetes import KubernetesGateway
    from portal.models import User
    from tenants import desired, reconcile
    from tenants.models import Flavor, QuotaGrant, Team

    real = gateway()
    assert isinstance(real, KubernetesGateway)  # the benchmark runs against a real control plane
    cluster = CountingGateway(real)
    reset_gateway(cluster)
    admin = User.objects.create(username="bench", is_platform_admin=True)
    flavors = [
        Flavor.objects.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100", capacity_units=10_000,
                              node_labels={"gpu": "h100"}),
        Flavor.objects.create(name="A100 MIG", slug="a100-mig", resource_name="nvidia.com/mig-1g.10gb", gpu_model="A100",
                              fraction_denominator=7, capacity_units=10_000, node_labels={"gpu": "a100"}),
        Flavor.objects.create(name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared", gpu_model="T4",
                              fraction_denominator=4, capacity_units=10_000, node_labels={"gpu": "t4"}),
    ]
    teams = [Team.objects.create(slug=f"bench-{i:03d}", name=f"Bench {i}") for i in range(team_count)]
    QuotaGrant.objects.bulk_create([QuotaGrant(team=t, flavor=f, units=2) for t in teams for f in flavors])
    reconcile.platform_reconcile()
    del admin

    # The floor: the same objects, other names, applied with the bare client.
    specs = desired.team_specs()
    floor_objects = []
    for _, spec in specs.values():
        for obj in desired.team_objects(spec):
            # Same shape, other names, and not labelled as the portal's: the pass must not prune them.
            text = json.dumps(obj).replace(spec.slug, spec.slug.replace("bench-", "floor-"))
            text = text.replace('"gpu-portal"}', '"gpu-portal-floor"}').replace('"gpu-portal",', '"gpu-portal-floor",')
            floor_objects.append(json.loads(text))
    api = k8s.ApiClient(real.configuration)

    def bare_apply(obj: dict) -> None:
        ref = ref_of(obj)
        params = api.param_serialize(
            "PATCH", ref.info.object_path(ref.name, ref.namespace),
            query_params=[("fieldManager", "bench-floor"), ("force", "true")],
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=obj, auth_settings=["BearerToken"],
        )
        api.call_api(*params).read()

    started = time.perf_counter()
    for obj in floor_objects:
        bare_apply(obj)
    floor_first = time.perf_counter() - started
    started = time.perf_counter()
    for obj in floor_objects:
        bare_apply(obj)
    floor_again = time.perf_counter() - started

    calls = cluster.total
    started = time.perf_counter()
    for team in teams:
        reconcile.team_reconcile(team_id=team.pk)
    portal_first = time.perf_counter() - started
    first_calls = cluster.total - calls

    started = time.perf_counter()
    for api_version, kind in reconcile.owned_kinds():
        probe = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "x"}}
        info_path = ref_of(probe).info.collection_path()
        params = api.param_serialize("GET", info_path,
                                     query_params=[("labelSelector", "app.kubernetes.io/managed-by=gpu-portal")],
                                     header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        api.call_api(*params).read()
    floor_list = time.perf_counter() - started

    calls = cluster.total
    started = time.perf_counter()
    result = reconcile.cluster_reconcile()
    portal_again = time.perf_counter() - started
    again_calls = cluster.total - calls

    n = len(teams)
    return {
        "teams": n,
        "objects_per_team": len(floor_objects) / n,
        "floor_first_apply_ms_per_team": round(1000 * floor_first / n, 1),
        "portal_first_provision_ms_per_team": round(1000 * portal_first / n, 1),
        "first_provision_ratio_to_floor": round(portal_first / floor_first, 2),
        "portal_api_calls_per_team_first": round(first_calls / n, 2),
        "floor_no_change_reapply_ms_per_team": round(1000 * floor_again / n, 1),
        "floor_list_all_owned_s": round(floor_list, 3),
        "portal_no_change_pass_s": round(portal_again, 3),
        "no_change_pass_ratio_to_floor_list": round(portal_again / floor_list, 2),
        "portal_no_change_pass_api_calls": again_calls,
        "portal_no_change_pass_writes": result.writes,
        "portal_no_change_pass_applied": result.applied[:5],
    }


if __name__ == "__main__":
    main()
