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
- the floor, measured in the same run under the same load: a separate process with the bare
  `kubernetes` client server-side applies the same Job (under other names, its labels replaced so
  that Kueue and the portal's informer leave it alone: it stays suspended) into the same namespace
  at a low steady rate (`--floor-rate`, 2 per second) from the first steady launch to the last
  launch of the sweep, each sample counted in the phase it started in; the headline ratio is the
  steady launch p95 over this floor's p95 in the steady phase. The old floor, 200 applies one
  after another after the load has drained (a quiet API server), is still reported, apart;
- where a steady launch's time goes: the apply inside it, its database queries, and the rest
  (the portal's Python: middleware, DRF, checks, serializers), each timed inside the launch; and
  the CPU time its thread used (time.thread_time), which no wait inflates: the gap between a
  launch's wall clock and its CPU is waiting (for the API server, PostgreSQL, or the GIL, which
  the 8 launching threads and the informer share in this one process); the CPU of the whole
  process over the steady phase beside the launches' own (the rest is mostly the informer); and
  the cyclic collector's pauses, whose full runs stop every thread of the process;
- with `--sweep 10,20,30,40`: steady phases at rising rates after the burst, and the highest
  rate whose launch p95 stays under 300 ms.

The portal runs as production would: DEBUG off (with it on, Django keeps every query's SQL in
memory); `--debug` turns it on. With BENCH_PROFILE=1 the steady launches run under cProfile (one
profiler per thread, merged) and the profile is printed to stderr: it slows them, so a profiled
run's figures are not the ones to quote.

Each queue backend runs in turn, on a control plane of its own and in a process of its own, and
the figures are recorded side by side (`kueue.…`, `volcano.…`), each against its own run's floor;
`--queue-backend` runs one and only prints it.

Run through `make bench` (PostgreSQL is started for it), or with DATABASE_URL set:
    .venv/bin/python benchmarks/workloads.py [--rate 20] [--seconds 30] [--burst 200] [--sweep 10,20,30,40]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import multiprocessing
import os
import pstats
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

from benchmarks.results import QUEUE_BACKENDS, per_queue_backend, record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start
from benchmarks.stats import percentile  # noqa: E402 - after the checkout is on the path


def ms(values: list[float], q: float) -> float | None:
    return round(1000 * percentile(values, q), 1) if values else None


# On Volcano, the floor's Jobs name a Queue that does not exist and have no pods to make: Volcano's
# job controller makes their PodGroups and nothing more (pods it would make, the webhook refuses,
# and the controller retries them, which would be load the launches' Jobs do not bring).
FLOOR_QUEUE = "bench-floor-nowhere"


def floor_copy(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """What a launch applies (a batch Job; on Volcano a Volcano Job) as the floor applies it:
    another name, labels that neither the queue nor the informer picks up, and nothing that runs
    (the batch Job suspended, as Kueue suspends it anyway; the Volcano Job in FLOOR_QUEUE, of no pods)."""
    copies = []
    for original in objects:
        obj = json.loads(json.dumps(original))
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"] = {"bench": "floor"}
        if obj["kind"] == "Job":
            volcano = obj["apiVersion"] != "batch/v1"
            template = (obj["spec"]["tasks"][0] if volcano else obj["spec"])["template"].setdefault("metadata", {})
            template["labels"] = {"bench": "floor"}
            if volcano:
                obj["spec"].update(queue=FLOOR_QUEUE, minAvailable=0)
                obj["spec"]["tasks"][0]["replicas"] = 0
            else:
                obj["spec"]["suspend"] = True
        copies.append(obj)
    return copies


def bare_apply(api: Any, obj: dict[str, Any]) -> float:
    """One server-side apply with the bare client, as the portal's gateway sends it; seconds taken."""
    from portal.kube.base import ref_of

    ref = ref_of(obj)
    params = api.param_serialize("PATCH", ref.info.object_path(ref.name, ref.namespace),
                                 query_params=[("fieldManager", "bench-floor"), ("force", "true")],
                                 header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                                 body=obj, auth_settings=["BearerToken"])
    started = time.perf_counter()
    api.call_api(*params).read()
    return time.perf_counter() - started


def bare_applies(api: Any, objects: list[dict[str, Any]]) -> float:
    return sum(bare_apply(api, obj) for obj in objects)


def floor_applier(kubeconfig: str, job: list[dict[str, Any]], rate: float, ready: Any, go: Any, stop: Any,
                  out: Any) -> None:
    """The same-run floor, in its own process so that it shares the API server and the machine
    with the launches but not the portal's process (its threads and its GIL): applies what a
    launch applies at `rate` per second, on a fixed schedule, from `go` to `stop`; sends back
    (wall-clock start, seconds) for each."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    api = k8s.ApiClient(configuration)
    bare_applies(api, floor_copy(job, "floor-run-warmup"))  # the connection opened, as the portal's are
    ready.set()
    go.wait()
    samples: list[tuple[float, float]] = []
    start = time.perf_counter()
    index = 0
    while not stop.is_set():
        delay = start + index / rate - time.perf_counter()
        if delay > 0 and stop.wait(delay):
            break
        started = time.time()
        samples.append((started, bare_applies(api, floor_copy(job, f"floor-run-{index}"))))
        index += 1
    out.put(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--sweep", type=lambda text: [float(rate) for rate in text.split(",") if rate], default=[],
                        help="Steady rates to try after the burst, lowest first, e.g. 10,20,30,40: the highest whose "
                             "p95 stays under 300 ms is reported (the sweep stops at the first that does not).")
    parser.add_argument("--sweep-seconds", type=float, default=20)
    parser.add_argument("--floor-rate", type=float, default=2,
                        help="Bare applies per second by the same-run floor's process, throughout the launches.")
    parser.add_argument("--debug", action="store_true", help="Run the portal with DEBUG on (off by default, as in production).")
    parser.add_argument("--queue-backend", choices=QUEUE_BACKENDS,
                        help="Only this one, printed and not recorded; by default each in turn, recorded side by side.")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL (PostgreSQL), or run `make bench`, which starts one.")
    if args.queue_backend is None:
        record("workloads", per_queue_backend(__file__, sys.argv[1:]))
        return

    os.environ.update({"PORTAL_CLUSTER": "kubernetes", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "DEBUG": "1" if args.debug else "0", "KUBE_QPS": "500",
                       "KUBE_BURST": "500", "LOG_LEVEL": "WARNING",
                       # One token launches the whole load on purpose: the site's limits would cut it short.
                       "PORTAL_LAUNCH_RATE": "1000000/minute", "PORTAL_TEAM_MAX_WORKLOADS": "1000000",
                       "PORTAL_QUEUE_BACKEND": args.queue_backend,
                       "PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-")})
    from tests.cluster.harness import ControlPlane, ensure_built

    with ControlPlane(ensure_built(), pod_run_seconds=2, queue_backend=args.queue_backend) as cp:
        for index in range(4):
            cp.add_gpu_node(f"bench-gpu-{index}", labels={"gpu": "h100"}, allocatable={"nvidia.com/gpu": "256", "pods": "1000"})
        os.environ["KUBECONFIG"] = str(cp.kubeconfig_path)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("flush", interactive=False, verbosity=0)  # the other backend's run used this database before
        import portal.wsgi  # noqa: F401 - the portal starts as its web process does

        print(json.dumps(run(args)))  # one line, the last: the parent reads it


def run(args: argparse.Namespace) -> dict[str, object]:
    from django.db import connection
    from django.test import Client
    from django.utils.dateparse import parse_datetime

    from billing.rates import services as billing_services
    from jobs import kinds, manifests, services
    from jobs.models import Workload, WorkloadTransition
    from jobs.watch import WorkloadInformer
    from portal import tokens
    from portal.kube import FIELD_MANAGER, gateway, reset_gateway
    from portal.kube.counting import CountingGateway
    from portal.kube.kubernetes import KubernetesGateway
    from portal.models import User
    from tenants import reconcile
    from tenants.models import Flavor, Membership, QuotaGrant, Team

    real = gateway()
    assert isinstance(real, KubernetesGateway)  # the benchmark runs against a real control plane
    applies: list[float] = []
    local = threading.local()

    class TimedGateway(CountingGateway):
        def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
            started = time.perf_counter()
            try:
                return super().apply(obj, field_manager=field_manager, force=force)
            finally:
                elapsed = time.perf_counter() - started
                applies.append(elapsed)
                local.apply = getattr(local, "apply", 0.0) + elapsed

    cluster = TimedGateway(real)
    reset_gateway(cluster)
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    member = User.objects.create(username="bench-member")
    flavor = Flavor.objects.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100",
                                   capacity_units=1024, node_labels={"gpu": "h100"})
    billing_services.rate_set(actor=admin, flavor=flavor, price_per_gpu_hour="2.75")  # nothing launches unpriced
    team = Team.objects.create(slug="bench", name="Bench", pod_limit=10_000)
    Membership.objects.create(team=team, user=member, role=Membership.Role.LEAD)
    QuotaGrant.objects.create(team=team, flavor=flavor, units=1024)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    services.image_registry_add(user=admin, prefix="registry.example.com")
    template = services.template_create(user=admin, slug="bench-train", name="Bench", kind="training", flavors=[flavor],
                                        image="registry.example.com/train:1", command=["python", "train.py"],
                                        default_cpu=1, default_memory_gib=1, parameters=[])
    _, secret = tokens.api_token_create(user=member, name="bench", expires_in_days=1)
    body = json.dumps({"team": "bench", "template": "bench-train", "flavor": "h100", "units": 1})

    # The Job a launch of that body makes, for the same-run floor to apply before any launch has
    # made one; checked against a launched workload's Job at the end.
    version = template.current
    floor_job = kinds.workload_objects(spec=services.workload_spec(Workload(
        pk=1, team=team, owner=member, template_version=version, name="bench-train", parameters={}, flavor=flavor,
        units=1, workers=1, cpu=version.default_cpu, memory_gib=version.default_memory_gib,
        priority=version.default_priority)))
    spawn = multiprocessing.get_context("spawn")
    floor_ready, floor_go, floor_stop, floor_out = spawn.Event(), spawn.Event(), spawn.Event(), spawn.Queue()
    floor_process = spawn.Process(target=floor_applier, daemon=True, args=(
        os.environ["KUBECONFIG"], floor_job, args.floor_rate, floor_ready, floor_go, floor_stop, floor_out))
    floor_process.start()

    informer = WorkloadInformer()
    watcher = threading.Thread(target=informer.run, daemon=True)
    watcher.start()
    while not all(ready.is_set() for ready in informer.ready.values()):
        time.sleep(0.05)
    if not floor_ready.wait(60):
        sys.exit("The same-run floor's process did not start.")
    calls_before = cluster.total

    errors: list[str] = []
    profiling = os.environ.get("BENCH_PROFILE") == "1"
    profiles: list[cProfile.Profile] = []
    # Per steady launch: (seconds in all, in its apply, in its database queries, queries, CPU
    # seconds of its thread: what the portal's Python itself spent, without the waits).
    parts: list[tuple[float, float, float, int, float]] = []

    def timed_query(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            local.db += time.perf_counter() - started
            local.queries += 1

    def launch(*, steady: bool = False) -> float:
        client = getattr(local, "client", None) or Client()
        local.client = client
        local.apply, local.db, local.queries = 0.0, 0.0, 0
        profile: cProfile.Profile | None = None
        if profiling and steady:
            profile = getattr(local, "profile", None)
            if profile is None:
                profile = local.profile = cProfile.Profile()
                profiles.append(profile)
        started, cpu_started = time.perf_counter(), time.thread_time()
        with connection.execute_wrapper(timed_query):
            if profile is not None:
                profile.enable()
            response = client.post("/api/workloads/", body, content_type="application/json",
                                   HTTP_AUTHORIZATION=f"Token {secret}")
            if profile is not None:
                profile.disable()
        elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
        if steady:
            parts.append((elapsed, local.apply, local.db, local.queries, cpu))
        if response.status_code != 201:
            errors.append(f"{response.status_code}: {response.content[:200]!r}")
        return elapsed

    def steady_phase(pool: ThreadPoolExecutor, rate: float, seconds: float, *, steady: bool = False
                     ) -> tuple[list[float], float, tuple[float, float]]:
        futures = []
        window_start = time.time()
        start = time.perf_counter()
        for index in range(int(rate * seconds)):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(launch, steady=steady))
        latencies = [f.result() for f in futures]
        return latencies, time.perf_counter() - start, (window_start, time.time())

    # The cyclic collector's pauses in the steady phase: a full collection stops every thread of
    # the process (the launches and the informer) while it walks the heap.
    pauses: list[tuple[int, float]] = []
    collecting: dict[str, float] = {}

    def collector_timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting["started"] = time.perf_counter()
        elif "started" in collecting:
            pauses.append((info["generation"], time.perf_counter() - collecting.pop("started")))

    sweep: list[dict[str, Any]] = []
    sweep_windows: list[tuple[float, float]] = []
    swept: list[float] = []
    floor_go.set()
    with ThreadPoolExecutor(max_workers=8) as pool:
        applies.clear()
        gc.callbacks.append(collector_timed)
        process_cpu_started = time.process_time()
        steady, steady_wall, steady_window = steady_phase(pool, args.rate, args.seconds, steady=True)
        steady_process_cpu = time.process_time() - process_cpu_started
        gc.callbacks.remove(collector_timed)
        steady_applies = list(applies)
        burst_window_start = time.time()
        burst_start = time.perf_counter()
        burst = [f.result() for f in [pool.submit(launch) for _ in range(args.burst)]]
        burst_wall = time.perf_counter() - burst_start
        burst_window = (burst_window_start, time.time())
        for rate in sorted(args.sweep):
            time.sleep(5)  # the burst's (or the last rate's) pods finish and the queue drains first
            latencies, wall, window = steady_phase(pool, rate, args.sweep_seconds)
            swept += latencies
            sweep_windows.append(window)
            sweep.append({"rate_per_s": rate, "achieved_rate_per_s": round(len(latencies) / wall, 1),
                          "launch_p50_ms": ms(latencies, 0.5), "launch_p95_ms": ms(latencies, 0.95)})
            if percentile(latencies, 0.95) >= 0.3:
                break
    floor_stop.set()
    floor_samples: list[tuple[float, float]] = floor_out.get(timeout=60)
    floor_process.join(timeout=30)
    launches_done = time.monotonic()

    def floor_in(window: tuple[float, float]) -> list[float]:
        return [seconds for started, seconds in floor_samples if window[0] <= started < window[1]]

    floor_steady = floor_in(steady_window)
    for phase, window in zip(sweep, sweep_windows, strict=True):
        samples = floor_in(window)
        phase.update({"same_run_floor_p50_ms": ms(samples, 0.5), "same_run_floor_p95_ms": ms(samples, 0.95),
                      "same_run_floor_samples": len(samples),
                      "launch_p95_over_same_run_floor_p95": round(phase["launch_p95_ms"] / ms(samples, 0.95), 2)
                      if samples else None})

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

    # The same Job as the launches made: only the names and labels the floor replaces differ.
    sample = Workload.objects.order_by("pk").first()
    assert sample is not None  # the launches above recorded workloads
    job = kinds.workload_objects(spec=services.workload_spec(sample))
    assert floor_copy(job, "same") == floor_copy(floor_job, "same"), "the floor applies other objects than the launches"

    # The quiet floor: the same Job applied one after another once the load has drained.
    from kubernetes import client as k8s

    api = k8s.ApiClient(real.configuration)
    quiet_floor = [bare_applies(api, floor_copy(job, f"floor-{index}")) for index in range(200)]

    if profiling:
        merged = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            merged.add(profile)
        for order in ("cumulative", "tottime"):
            text = io.StringIO()
            merged.stream = text  # type: ignore[attr-defined]
            merged.sort_stats(order).print_stats(45)
            print(text.getvalue(), file=sys.stderr)

    launch_only = [total_s - apply_s for total_s, apply_s, *_ in parts]
    rest = [total_s - apply_s - db_s for total_s, apply_s, db_s, *_ in parts]
    cpu = [cpu_s for *_, cpu_s in parts]
    succeeded = Workload.objects.filter(phase=Workload.Phase.SUCCEEDED).count()
    steady_p95 = percentile(steady, 0.95)
    return {
        "steady": {"launches": len(steady), "target_rate_per_s": args.rate,
                   "achieved_rate_per_s": round(len(steady) / steady_wall, 1),
                   "launch_p50_ms": ms(steady, 0.5), "launch_p95_ms": ms(steady, 0.95),
                   "apply_in_launch_p50_ms": ms(steady_applies, 0.5),
                   "apply_in_launch_p95_ms": ms(steady_applies, 0.95),
                   "launch_minus_its_apply_p50_ms": ms(launch_only, 0.5),
                   "launch_minus_its_apply_p95_ms": ms(launch_only, 0.95),
                   "db_in_launch_p50_ms": ms([db for _, _, db, *_ in parts], 0.5),
                   "db_in_launch_p95_ms": ms([db for _, _, db, *_ in parts], 0.95),
                   "queries_per_launch": round(statistics.mean(part[3] for part in parts), 2) if parts else None,
                   "rest_in_launch_p50_ms": ms(rest, 0.5), "rest_in_launch_p95_ms": ms(rest, 0.95),
                   "cpu_of_launch_thread_p50_ms": ms(cpu, 0.5), "cpu_of_launch_thread_p95_ms": ms(cpu, 0.95),
                   "cpu_of_the_process_s": round(steady_process_cpu, 2), "cpu_of_the_launches_s": round(sum(cpu), 2),
                   "collector_pauses": {f"gen{generation}": {
                       "count": len(times), "total_ms": round(1000 * sum(times), 1), "max_ms": round(1000 * max(times), 1)}
                       for generation in (0, 1, 2)
                       if (times := [seconds for which, seconds in pauses if which == generation])},
                   "same_run_floor_p50_ms": ms(floor_steady, 0.5), "same_run_floor_p95_ms": ms(floor_steady, 0.95),
                   "same_run_floor_samples": len(floor_steady),
                   "launch_p95_over_same_run_floor_p95": round(steady_p95 / percentile(floor_steady, 0.95), 2)
                   if floor_steady else None},
        "burst": {"launches": len(burst), "wall_s": round(burst_wall, 2),
                  "launch_p50_ms": ms(burst, 0.5), "launch_p95_ms": ms(burst, 0.95),
                  "same_run_floor_p50_ms": ms(floor_in(burst_window), 0.5),
                  "same_run_floor_p95_ms": ms(floor_in(burst_window), 0.95),
                  "same_run_floor_samples": len(floor_in(burst_window))},
        "sweep": sweep,
        # The steady phase is a rate tried too: 30 s of it, where each sweep rate has --sweep-seconds.
        "highest_rate_with_p95_under_300ms": max(
            [phase["rate_per_s"] for phase in sweep if phase["launch_p95_ms"] < 300]
            + ([args.rate] if steady and steady_p95 * 1000 < 300 else []), default=None),
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
        "quiet_floor_after_the_load_p50_ms": ms(quiet_floor, 0.5),
        "quiet_floor_after_the_load_p95_ms": ms(quiet_floor, 0.95),
        "launch_p95_over_quiet_floor_p95": round(steady_p95 / percentile(quiet_floor, 0.95), 2),
    }


if __name__ == "__main__":
    main()
