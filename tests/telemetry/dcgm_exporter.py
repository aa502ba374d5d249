"""A stand-in for NVIDIA's dcgm-exporter that the tests drive: it serves `/metrics` in
dcgm-exporter's exact text format (its HELP lines, label names and order, per GPU or MIG
instance, with the pod that holds it), with the values a test sets, and can be taken down.
`KwokFeed` feeds it from the real control plane's KWOK pods instead of by hand."""

from __future__ import annotations

import contextlib
import http.server
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

# (name, HELP) as dcgm-exporter's default-counters.csv has them; all are gauges.
COUNTERS = [
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
]


@dataclass(frozen=True)
class Gpu:
    """One GPU (or MIG instance) as the exporter reports it, and the pod holding it."""

    node: str
    gpu: int
    uuid: str
    namespace: str = ""
    pod: str = ""
    container: str = "main"
    engine_active: float = 0.0  # ratio 0..1
    fb_used: int = 1024
    fb_free: int = 80_535
    power: float = 70.0
    temperature: int = 35
    xid: int = 0
    mig_profile: str = ""  # e.g. "1g.10gb"; MIG instances have no DCGM_FI_DEV_GPU_UTIL
    mig_instance: int = 0
    # A shared (time-sliced, MPS) GPU is reported once per replica a pod holds, as dcgm-exporter does
    # with KUBERNETES_VIRTUAL_GPUS: the same GPU's labels and values, and this replica's number.
    vgpu: str = ""

    @property
    def key(self) -> str:
        return f"{self.uuid}/{self.vgpu}" if self.vgpu else self.uuid

    def labels(self) -> str:
        labels = [("gpu", str(self.gpu)), ("UUID", self.uuid), ("pci_bus_id", f"00000000:{0x10 + self.gpu:02X}:00.0"),
                  ("device", f"nvidia{self.gpu}"), ("modelName", "NVIDIA H100 80GB HBM3")]
        if self.mig_profile:
            labels += [("GPU_I_PROFILE", self.mig_profile), ("GPU_I_ID", str(self.mig_instance))]
        labels += [("Hostname", self.node), ("DCGM_FI_DRIVER_VERSION", "550.54.15")]
        if self.pod:
            labels += [("container", self.container), ("namespace", self.namespace), ("pod", self.pod)]
        if self.vgpu:
            labels.append(("vgpu", self.vgpu))
        return ",".join(f'{name}="{value}"' for name, value in labels)

    def value(self, metric: str) -> str | None:
        values: dict[str, object] = {
            "DCGM_FI_DEV_GPU_TEMP": self.temperature, "DCGM_FI_DEV_POWER_USAGE": f"{self.power:.3f}",
            "DCGM_FI_DEV_GPU_UTIL": None if self.mig_profile else round(self.engine_active * 100),
            "DCGM_FI_DEV_FB_FREE": self.fb_free, "DCGM_FI_DEV_FB_USED": self.fb_used, "DCGM_FI_DEV_XID_ERRORS": self.xid,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{self.engine_active:.6f}",
        }
        value = values[metric]
        return None if value is None else str(value)


class QuietServer(http.server.ThreadingHTTPServer):
    """Says nothing of a client that hung up. socketserver prints each such error's traceback from
    its own thread, and on CPython 3.11.7 formatting a traceback calls ast.parse, whose recursion
    counter is shared by all threads: two CI runs died of "AST constructor recursion depth
    mismatch" in the main thread's ast.parse (Hypothesis, then pytest's own report) while this
    server printed BrokenPipeErrors."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class DcgmExporter:
    def __init__(self) -> None:
        self.gpus: dict[str, Gpu] = {}  # by key: the UUID, and the replica of a shared one
        self.available = True
        self.scrapes = 0
        self.lock = threading.Condition()
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                with exporter.lock:
                    body = exporter.text().encode() if exporter.available else b""
                    exporter.scrapes += 1
                    exporter.lock.notify_all()
                if not body and not exporter.available:
                    self.send_error(503, "DCGM is not answering")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(ConnectionError):  # a scrape Prometheus gave up on
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def text(self) -> str:
        lines = []
        for name, help_text in COUNTERS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            for gpu in sorted(self.gpus.values(), key=lambda g: (g.node, g.gpu, g.mig_instance, g.vgpu)):
                value = gpu.value(name)
                if value is not None:
                    lines.append(f"{name}{{{gpu.labels()}}} {value}")
        return "\n".join(lines) + "\n"

    def put(self, gpu: Gpu) -> None:
        with self.lock:
            self.gpus[gpu.key] = gpu

    def change(self, key: str, **values: object) -> None:
        with self.lock:
            self.gpus[key] = replace(self.gpus[key], **values)  # type: ignore[arg-type]

    def remove_namespace(self, namespace: str) -> None:
        with self.lock:
            self.gpus = {k: g for k, g in self.gpus.items() if g.namespace != namespace}

    def wait_scrapes(self, count: int = 2, *, timeout: float = 15) -> None:
        """Waits until Prometheus has scraped `count` more times, so it holds what was set."""
        with self.lock:
            target = self.scrapes + count
            if not self.lock.wait_for(lambda: self.scrapes >= target, timeout=timeout):
                raise AssertionError(f"Prometheus did not scrape the DCGM stand-in within {timeout:.0f}s")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


KWOK_UUID_PREFIX = "GPU-kwok-"


class KwokFeed:
    """Feeds the exporter from the real control plane's pods, as dcgm-exporter learns from the
    kubelet's pod-resources API which pod holds which GPU: every running pod that requests
    `resource` gets that many GPUs of its node (the lowest free indices, kept while it runs),
    reporting the engine active the test sets for its name's prefix (`set_busy`), `default`
    otherwise. GPUs of pods that ended leave the exporter; what a test put by hand stays.

    With `replicas` above 1 the resource is a shared GPU's (time-sliced, MPS): the indices are
    replicas, `replicas` to a card, and each held replica is reported as dcgm-exporter does with
    KUBERNETES_VIRTUAL_GPUS: the card's UUID and figures (as busy as the pods on it together, at
    most 100 %), labelled with the replica's number."""

    def __init__(self, exporter: DcgmExporter, list_pods: Callable[[], list[dict[str, Any]]], *,
                 resource: str = "nvidia.com/gpu", default: float = 0.0, interval: float = 0.5, replicas: int = 1) -> None:
        self.exporter, self.list_pods, self.resource = exporter, list_pods, resource
        self.default, self.interval, self.replicas = default, interval, replicas
        self.busy: dict[str, float] = {}  # pod name prefix → engine active
        self.slots: dict[tuple[str, int], tuple[str, str]] = {}  # (node, index) → (namespace, pod)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="kwok-feed")

    def set_busy(self, pod_prefix: str, ratio: float) -> None:
        self.busy[pod_prefix] = ratio

    def start(self) -> KwokFeed:
        self.tick()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        with self.exporter.lock:
            self.exporter.gpus = {k: g for k, g in self.exporter.gpus.items() if not k.startswith(KWOK_UUID_PREFIX)}

    def _run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a read that failed is tried again next tick
                continue

    def _requested(self, pod: dict[str, Any]) -> int:
        return sum(int((c.get("resources") or {}).get("limits", {}).get(self.resource, 0) or 0)
                   for c in pod["spec"].get("containers", []))

    def _engine_active(self, pod: str) -> float:
        matches = [prefix for prefix in self.busy if pod.startswith(prefix)]
        return self.busy[max(matches, key=len)] if matches else self.default

    def tick(self) -> None:
        running = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in self.list_pods()
                   if (p.get("status") or {}).get("phase") == "Running" and p["spec"].get("nodeName") and self._requested(p)}
        self.slots = {slot: owner for slot, owner in self.slots.items() if owner in running}
        for owner, pod in sorted(running.items()):
            node = pod["spec"]["nodeName"]
            held = [index for (n, index), o in self.slots.items() if n == node and o == owner]
            free = (index for index in range(1024) if (node, index) not in self.slots)
            for _ in range(self._requested(pod) - len(held)):
                self.slots[(node, next(free))] = owner
        if self.replicas <= 1:
            gpus = {f"{KWOK_UUID_PREFIX}{node}-{index}": Gpu(
                        node=node, gpu=index, uuid=f"{KWOK_UUID_PREFIX}{node}-{index}", namespace=namespace, pod=pod,
                        engine_active=self._engine_active(pod), fb_used=40_000, fb_free=41_559, power=300.0, temperature=60)
                    for (node, index), (namespace, pod) in self.slots.items()}
        else:
            on_card: dict[tuple[str, int], set[str]] = {}
            for (node, index), (_, holder) in self.slots.items():
                on_card.setdefault((node, index // self.replicas), set()).add(holder)
            busy = {card: min(1.0, sum(self._engine_active(name) for name in names)) for card, names in on_card.items()}
            made = [Gpu(node=node, gpu=index // self.replicas, uuid=f"{KWOK_UUID_PREFIX}{node}-{index // self.replicas}",
                        namespace=namespace, pod=holder, engine_active=busy[(node, index // self.replicas)],
                        fb_used=10_000, fb_free=6_384, power=60.0, temperature=55, vgpu=str(index % self.replicas))
                    for (node, index), (namespace, holder) in self.slots.items()]
            gpus = {gpu.key: gpu for gpu in made}
        with self.exporter.lock:
            kept = {k: g for k, g in self.exporter.gpus.items() if not k.startswith(KWOK_UUID_PREFIX)}
            self.exporter.gpus = {**kept, **gpus}
