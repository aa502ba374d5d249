"""Launch benchmark on the real control plane (tests/cluster), through the REST API.

Launches training workloads with an API token at a steady rate (default 20 per second for
30 s), then a burst (default 200 at once), while the watch-driven sync (jobs.watch) runs as it
does in production. KWOK finishes each pod after 2 s. Reports, from the same run:

- launch latency: from the API call to the Job existing in the API server (the call returns
  after the portal applied it, so the call's duration is that time);
- status lag: from a pod finishing (its container's finishedAt, which Kubernetes writes in
  whole seconds, so the figure is an upper bound that may be up to 1 s high) to the portal
  recording the workload as succeeded; and exactly, the portal's own share: from the arrival
  of the watch event that carried a change to the commit that shows it (`WorkloadInformer.lags`,
  the portal's clock at both ends);
- API server calls the portal makes per workload over its whole life;
- the floor: a bare-client server-side apply of the same Job; and, to tell the portal's share of
  a launch from the API server's, how long the apply inside each steady launch took;
- with `--sweep 10,20,30,40`: steady phases at rising rates after the burst, and the highest
  rate whose launch p95 stays under 300 ms.

Run through `make bench` (PostgreSQL is started for it), or with DATABASE_URL set:
    .venv/bin/python benchmarks/workloads.py [--rate 20] [--seconds 30] [--burst 200] [--sweep 10,20,30,40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--sweep", type=lambda text: [float(rate) for rate in text.split(",") if rate], default=[],
                        help="Steady rates to try after the burst, lowest first, e.g. 10,20,30,40: the highest whose "
                             "p95 stays under 300 ms is reported (the sweep stops at the first that does not).")
    parser.add_argument("--sweep-seconds", type=float, default=20)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL (PostgreSQL), or run `make bench`, which starts one.")

    os.environ.update({"PORTAL_CLUSTER": "kubernetes", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "KUBE_QPS": "500", "KUBE_BURST": "500", "LOG_LEVEL": "WARNING",
                       # One token launches the whole load on purpose: the site's limits would cut it short.
                       "PORTAL_LAUNCH_RATE": "1000000/minute", "PORTAL_TEAM_MAX_WORKLOADS": "1000000",
                       "PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-")})
    from tests.cluster.harness import ControlPlane, ensure_built

    with ControlPlane(ensure_built(), pod_run_seconds=2) as cp:
        for index in range(4):
            cp.add_gpu_node(f"bench-gpu-{index}", labels={"gpu": "h100"}, allocatable={"nvidia.com/gpu": "256", "pods": "1000"})
        os.environ["KUBECONFIG"] = str(cp.kubeconfig_path)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(json.dumps(run(args), indent=2))


def run(args: argparse.Namespace) -> dict[str, object]:
    from django.test import Client
    from django.utils.dateparse import parse_datetime

    from jobs import manifests, services
    from jobs.models import Workload, WorkloadTransition
    from jobs.watch import WorkloadInformer
    from portal import tokens
    from portal.kube import FIELD_MANAGER, gateway, ref_of, reset_gateway
    from portal.kube.counting import CountingGateway
    from portal.kube.kubernetes import KubernetesGateway
    from portal.models import User
    from tenants import reconcile
    from tenants.models import Flavor, Membership, QuotaGrant, Team

    real = gateway()
    assert isinstance(real, KubernetesGateway)  # the benchmark runs against a real control plane
    applies: list[float] = []

    class TimedGateway(CountingGateway):
        def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
            started = time.perf_counter()
            try:
                return super().apply(obj, field_manager=field_manager, force=force)
            finally:
                applies.append(time.perf_counter() - started)

    cluster = TimedGateway(real)
    reset_gateway(cluster)
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    member = User.objects.create(username="bench-member")
    flavor = Flavor.objects.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100",
                                   capacity_units=1024, node_labels={"gpu": "h100"})
    team = Team.objects.create(slug="bench", name="Bench", pod_limit=10_000)
    Membership.objects.create(team=team, user=member, role=Membership.Role.LEAD)
    QuotaGrant.objects.create(team=team, flavor=flavor, units=1024)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    services.image_registry_add(user=admin, prefix="registry.example.com")
    services.template_create(user=admin, slug="bench-train", name="Bench", kind="training", flavors=[flavor],
                             image="registry.example.com/train:1", command=["python", "train.py"], default_cpu=1,
                             default_memory_gib=1, parameters=[])
    _, secret = tokens.api_token_create(user=member, name="bench", expires_in_days=1)
    body = json.dumps({"team": "bench", "template": "bench-train", "flavor": "h100", "units": 1})

    informer = WorkloadInformer()
    watcher = threading.Thread(target=informer.run, daemon=True)
    watcher.start()
    while not all(ready.is_set() for ready in informer.ready.values()):
        time.sleep(0.05)
    calls_before = cluster.total

    errors: list[str] = []
    local = threading.local()

    def launch() -> float:
        client = getattr(local, "client", None) or Client()
        local.client = client
        started = time.perf_counter()
        response = client.post("/api/workloads/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {secret}")
        elapsed = time.perf_counter() - started
        if response.status_code != 201:
            errors.append(f"{response.status_code}: {response.content[:200]!r}")
        return elapsed

    def steady_phase(pool: ThreadPoolExecutor, rate: float, seconds: float) -> tuple[list[float], float]:
        futures = []
        start = time.perf_counter()
        for index in range(int(rate * seconds)):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(launch))
        return [f.result() for f in futures], time.perf_counter() - start

    sweep: list[dict[str, float]] = []
    swept: list[float] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        applies.clear()
        steady, steady_wall = steady_phase(pool, args.rate, args.seconds)
        steady_applies = list(applies)
        burst_start = time.perf_counter()
        burst = [f.result() for f in [pool.submit(launch) for _ in range(args.burst)]]
        burst_wall = time.perf_counter() - burst_start
        for rate in sorted(args.sweep):
            time.sleep(5)  # the burst's (or the last rate's) pods finish and the queue drains first
            latencies, wall = steady_phase(pool, rate, args.sweep_seconds)
            swept += latencies
            sweep.append({"rate_per_s": rate, "achieved_rate_per_s": round(len(latencies) / wall, 1),
                          "launch_p50_ms": round(1000 * percentile(latencies, 0.5), 1),
                          "launch_p95_ms": round(1000 * percentile(latencies, 0.95), 1)})
            if percentile(latencies, 0.95) >= 0.3:
                break
    launches_done = time.monotonic()

    total = len(steady) + len(burst) + len(swept)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        done = Workload.objects.filter(phase=Workload.Phase.SUCCEEDED).count()
        if done >= total - len(errors):
            break
        time.sleep(1)
    drained = time.monotonic()
    informer.stop()
    portal_lags = list(informer.lags)
    portal_calls = cluster.total - calls_before

    # Status lag: pod finishedAt (whole seconds) to the portal's "succeeded" transition.
    finished_at: dict[int, float] = {}
    for pod in cluster.list("v1", "Pod", namespace="bench")[0]:
        label = pod["metadata"].get("labels", {}).get(manifests.WORKLOAD_LABEL, "")
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated")
            if label.isdigit() and terminated and terminated.get("finishedAt"):
                finished = parse_datetime(terminated["finishedAt"])
                if finished is not None:
                    finished_at[int(label)] = finished.timestamp()
    lags = [
        t.at.timestamp() - finished_at[t.workload_id]
        for t in WorkloadTransition.objects.filter(phase=Workload.Phase.SUCCEEDED)
        if t.workload_id in finished_at
    ]

    # The floor: the same Job, applied with the bare client.
    from kubernetes import client as k8s

    api = k8s.ApiClient(real.configuration)
    sample = Workload.objects.first()
    assert sample is not None  # the launches above recorded workloads
    job = manifests.make_workload_objects(spec=services.workload_spec(sample))[0]
    floor: list[float] = []
    for index in range(200):
        obj = json.loads(json.dumps(job))
        obj["metadata"]["name"] = f"floor-{index}"
        obj["metadata"]["labels"] = {"bench": "floor"}
        obj["spec"]["template"]["metadata"]["labels"] = {"bench": "floor"}
        ref = ref_of(obj)
        params = api.param_serialize("PATCH", ref.info.object_path(ref.name, ref.namespace),
                                     query_params=[("fieldManager", "bench-floor"), ("force", "true")],
                                     header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                                     body=obj, auth_settings=["BearerToken"])
        started = time.perf_counter()
        api.call_api(*params).read()
        floor.append(time.perf_counter() - started)

    succeeded = Workload.objects.filter(phase=Workload.Phase.SUCCEEDED).count()
    return {
        "steady": {"launches": len(steady), "target_rate_per_s": args.rate,
                   "achieved_rate_per_s": round(len(steady) / steady_wall, 1),
                   "launch_p50_ms": round(1000 * percentile(steady, 0.5), 1),
                   "launch_p95_ms": round(1000 * percentile(steady, 0.95), 1),
                   "apply_in_launch_p50_ms": round(1000 * percentile(steady_applies, 0.5), 1),
                   "apply_in_launch_p95_ms": round(1000 * percentile(steady_applies, 0.95), 1)},
        "burst": {"launches": len(burst), "wall_s": round(burst_wall, 2),
                  "launch_p50_ms": round(1000 * percentile(burst, 0.5), 1),
                  "launch_p95_ms": round(1000 * percentile(burst, 0.95), 1)},
        "sweep": sweep,
        "highest_rate_with_p95_under_300ms": max((phase["rate_per_s"] for phase in sweep
                                                  if phase["launch_p95_ms"] < 300), default=None),
        "errors": errors[:5], "error_count": len(errors),
        "workloads_recorded": Workload.objects.count(), "workloads_succeeded": succeeded,
        "lost": total - Workload.objects.count(),
        "status_lag_upper_bound_p50_s": round(percentile(lags, 0.5), 2) if lags else None,
        "status_lag_upper_bound_p95_s": round(percentile(lags, 0.95), 2) if lags else None,
        "status_lag_samples": len(lags),
        "status_lag_portal_p50_s": round(percentile(portal_lags, 0.5), 3) if portal_lags else None,
        "status_lag_portal_p95_s": round(percentile(portal_lags, 0.95), 3) if portal_lags else None,
        "status_lag_portal_samples": len(portal_lags),
        "portal_api_calls_per_workload": round(portal_calls / max(total, 1), 2),
        "all_succeeded_s_after_last_launch": round(drained - launches_done, 1),
        "floor_bare_apply_p50_ms": round(1000 * statistics.median(floor), 1),
        "floor_bare_apply_p95_ms": round(1000 * percentile(floor, 0.95), 1),
    }


if __name__ == "__main__":
    main()
