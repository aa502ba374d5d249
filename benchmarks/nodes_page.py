"""The nodes page and API at 500 GPU nodes, and what the node check asks of the API server.

The simulated cluster gets `--nodes` GPU nodes spread over five flavors' pools (whole H100s and
A100s, MIG slices, a time-sliced and an MPS pool with GPU Feature Discovery's sharing labels; one
node in ten with an unhealthy device, one in fifty cordoned), `--workloads` running workloads
with an open run interval on a node each, and first 10 then `--teams` teams. For each team count
the node check runs (its API-server reads counted, its time taken), then the page and the API
are fetched through Django's test Client as a platform admin and timed, with their queries
counted. Target: the page p95 < 150 ms at 500 nodes; the same reads per check whatever the teams
(the Nodes, and the device plugin's and the exporter's pods).

    scripts/with-services.sh .venv/bin/python benchmarks/nodes_page.py \
        [--nodes 500] [--workloads 1500] [--teams 1000] [--requests 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.billing_pages import TARGET_MS, timed  # noqa: E402 - after the checkout is on the path
from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start

# name, slug, resource, sharing mode, fraction denominator, units per node, extra node labels
POOLS = [
    ("H100 80GB", "h100", "nvidia.com/gpu", "exclusive", 1, 8, {}),
    ("A100 80GB", "a100", "nvidia.com/gpu", "exclusive", 1, 8, {}),
    ("A100 1g.10gb", "a100-1g", "nvidia.com/mig-1g.10gb", "mig", 7, 56, {}),
    ("T4 shared", "t4-shared", "nvidia.com/gpu.shared", "time-sliced", 4, 32,
     {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "8"}),
    ("A10 MPS", "a10-mps", "nvidia.com/gpu.shared", "mps", 4, 32,
     {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "8"}),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--workloads", type=int, default=1500)
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Run it on PostgreSQL: scripts/with-services.sh .venv/bin/python benchmarks/nodes_page.py")
    os.environ.update({"PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-"),
                       "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING",
                       # As the chart sets them: the check also lists the GPU stack's pods.
                       "PORTAL_DEVICE_PLUGIN_POD_LABELS": "app=nvidia-device-plugin-daemonset",
                       "PORTAL_GPU_EXPORTER_POD_LABELS": "app=nvidia-dcgm-exporter"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args)
    print(json.dumps(figures, indent=2))
    record("nodes_page", figures)


def seed_cluster(nodes: int) -> list[str]:
    from portal.kube import NodeSpec, gateway
    from tenants.models import Flavor

    specs, names = [], []
    for flavor_name, slug, resource, mode, denominator, units, _ in POOLS:
        Flavor.objects.create(name=flavor_name, slug=slug, resource_name=resource, sharing_mode=mode, gpu_model=flavor_name,
                              fraction_denominator=denominator, capacity_units=units * nodes // len(POOLS),
                              node_labels={"pool": slug})
    for index in range(nodes):
        flavor_name, slug, resource, _, _, units, extra = POOLS[index % len(POOLS)]
        name = f"gpu-{slug}-{index:04}"
        labels = {"pool": slug, "nvidia.com/gpu.product": flavor_name.replace(" ", "-"), **extra}
        specs.append(NodeSpec(name=name, labels=labels, allocatable={resource: units - (1 if index % 10 == 0 else 0)}))
        names.append(name)
    gateway().expect_nodes(specs)
    return names


def seed_teams(count: int, *, start: int) -> list[Any]:
    from tenants.models import Team

    return Team.objects.bulk_create([Team(slug=f"team-{i:04}", name=f"Team {i:04}") for i in range(start, start + count)])


def seed_workloads(count: int, node_names: list[str], teams: list[Any]) -> None:
    import uuid

    from django.utils import timezone

    from jobs.models import RunInterval, Workload, WorkloadTemplate, WorkloadTemplateVersion
    from portal.models import User
    from tenants.models import Flavor

    owner = User.objects.create(username="bench-owner")
    template = WorkloadTemplate.objects.create(slug="bench-train", name="Bench training", kind="training")
    version = WorkloadTemplateVersion.objects.create(template=template, number=1, image="train:1")
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.all()}
    now = timezone.now()
    workloads = Workload.objects.bulk_create([
        Workload(team=teams[n % len(teams)], owner=owner, template_version=version, name=f"train-{n}",
                 flavor=flavors[POOLS[n % len(POOLS)][1]], units=1 + n % 4, cpu=4, memory_gib=16, priority="normal",
                 phase="running", created_at=now, submitted_at=now, seen_in_cluster_at=now)
        for n in range(count)], batch_size=2000)
    RunInterval.objects.bulk_create([
        RunInterval(workload=w, team=w.team, team_uid=w.team.uid, owner=owner, owner_username=owner.username,
                    flavor=w.flavor, fraction_numerator=1, fraction_denominator=w.flavor.fraction_denominator,
                    pod_uid=str(uuid.uuid4()), pod_name=f"{w.name}-0", node=node_names[n % len(node_names)],
                    resource_name=w.flavor.resource_name, units=w.units, started_at=now)
        for n, w in enumerate(workloads)], batch_size=2000)


def measure_check() -> dict[str, Any]:
    from portal.kube import gateway
    from tenants import nodes

    cluster = gateway()
    calls: list[tuple[Any, ...]] = []
    real = cluster.list

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    cluster.list = counted  # type: ignore[method-assign]
    try:
        begun = time.perf_counter()
        verdicts = nodes.check_flavors()
        took = time.perf_counter() - begun
    finally:
        cluster.list = real  # type: ignore[method-assign]
    return {"api_server_reads": len(calls), "check_ms": round(took * 1000, 1),
            "flavors_refused": sum(1 for verdict in verdicts.values() if verdict.problem)}


def measure_page(url: str, requests: int) -> dict[str, Any]:
    """The page through Django's test Client as a platform admin, timed as the billing pages are."""
    from django.test import Client

    from portal.models import User

    admin = User.objects.get_or_create(username="bench-admin", defaults={"is_platform_admin": True})[0]
    client = Client()
    client.force_login(admin)
    return timed(client, url, requests)


def run(args: argparse.Namespace) -> dict[str, Any]:
    node_names = seed_cluster(args.nodes)
    teams = seed_teams(10, start=0)
    seed_workloads(args.workloads, node_names, teams)
    figures: dict[str, Any] = {"nodes": args.nodes, "workloads_on_nodes": args.workloads, "target_p95_ms": TARGET_MS}
    figures["first_check_at_10_teams"] = measure_check()  # keeps every node: one row written each
    figures["quiet_check_at_10_teams"] = measure_check()  # nothing changed: nothing written
    figures["page_at_10_teams"] = measure_page("/platform/nodes/", args.requests)
    seed_teams(args.teams - 10, start=10)
    figures[f"quiet_check_at_{args.teams}_teams"] = measure_check()
    figures[f"page_at_{args.teams}_teams"] = measure_page("/platform/nodes/", args.requests)
    figures[f"api_first_page_at_{args.teams}_teams"] = measure_page("/api/nodes/", args.requests)
    figures["page_p95_under_target"] = figures[f"page_at_{args.teams}_teams"]["under_target"]
    return figures


if __name__ == "__main__":
    main()
