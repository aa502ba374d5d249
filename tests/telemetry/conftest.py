"""Telemetry on real parts: a real Prometheus (Debian's package) on loopback scraping a DCGM
exporter stand-in the tests drive, started once per session; and the simulated door. The
`telemetry` fixture runs each contract scenario on both with the same assertions."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from portal.metrics import Metrics, reset_metrics
from portal.metrics.prometheus import PrometheusMetrics
from portal.metrics.simulated import SimulatedMetrics, SimulatedPod
from tests.telemetry.dcgm_exporter import DcgmExporter, Gpu
from tests.telemetry.prometheus_server import PrometheusError, PrometheusServer

T = TypeVar("T")
_uuids = itertools.count(1)


@pytest.fixture(scope="session")
def dcgm_exporter() -> Iterator[DcgmExporter]:
    exporter = DcgmExporter()
    yield exporter
    exporter.stop()


@pytest.fixture(scope="session")
def prometheus_server(dcgm_exporter: DcgmExporter) -> Iterator[PrometheusServer]:
    server = PrometheusServer(scrape_targets=[f"127.0.0.1:{dcgm_exporter.port}"])
    try:
        server.start()
    except PrometheusError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


class TelemetryUnderTest:
    """One door and the means to make it report: the exporter stand-in behind the real
    Prometheus, or the simulated door's pods and settings."""

    def __init__(self, name: str, door: Metrics, exporter: DcgmExporter | None = None) -> None:
        self.name, self.door, self.exporter = name, door, exporter
        self.pods: list[SimulatedPod] = []
        self.gpus_of: dict[tuple[str, str], list[str]] = {}

    def namespace(self) -> str:
        return f"tm-{uuid.uuid4().hex[:8]}"

    def run_pod(self, namespace: str, pod: str, *, kind: str = "training", gpus: int = 1, engine_active: float = 0.9,
                mig_profile: str = "", node: str = "gpu-node-1", started_seconds_ago: float = 600) -> None:
        if self.exporter is not None:
            for index in range(gpus):
                gpu_uuid = f"GPU-{next(_uuids):08x}-test"
                self.gpus_of.setdefault((namespace, pod), []).append(gpu_uuid)
                self.exporter.put(Gpu(node=node, gpu=index, uuid=gpu_uuid, namespace=namespace, pod=pod,
                                      engine_active=engine_active, fb_used=60_000, fb_free=21_559, power=350.0,
                                      temperature=64, mig_profile=mig_profile, mig_instance=index + 1 if mig_profile else 0))
        else:
            assert isinstance(self.door, SimulatedMetrics)
            self.pods.append(SimulatedPod(namespace=namespace, name=pod, kind=kind, gpus=gpus,
                                          started_at=time.time() - started_seconds_ago, mig_profile=mig_profile,
                                          node=node))
            self.door.set_engine_active(namespace=namespace, pod=pod, percent=engine_active * 100)

    def share_card(self, node: str, holders: list[tuple[str, str, int, float]], *, replicas: int = 4,
                   power: float = 60.0) -> None:
        """One time-sliced card of `node`, shared `replicas` ways, held by (namespace, pod, replicas
        held, the engine active it would make alone) in that order: the exporter reports the card
        once per replica held, all with the card's figures (as busy as its pods together); the
        simulated door places the pods on a node that shares its GPUs `replicas` ways."""
        busy = min(1.0, sum(ratio for *_, ratio in holders))
        card = f"GPU-{next(_uuids):08x}-shared"
        replica = itertools.count()
        for order, (namespace, pod, held, ratio) in enumerate(holders):
            if self.exporter is not None:
                for _ in range(held):
                    gpu = Gpu(node=node, gpu=0, uuid=card, namespace=namespace, pod=pod, engine_active=busy,
                              fb_used=6_000, fb_free=10_000, power=power, temperature=55, vgpu=str(next(replica)))
                    self.gpus_of.setdefault((namespace, pod), []).append(gpu.key)
                    self.exporter.put(gpu)
            else:
                assert isinstance(self.door, SimulatedMetrics)
                self.pods.append(SimulatedPod(namespace=namespace, name=pod, kind="training", gpus=held,
                                              started_at=time.time() - 900 + order, node=node, replicas=replicas))
                self.door.set_engine_active(namespace=namespace, pod=pod, percent=ratio * 100)

    def set_engine_active(self, namespace: str, pod: str, ratio: float) -> None:
        if self.exporter is not None:
            for gpu_uuid in self.gpus_of[(namespace, pod)]:
                self.exporter.change(gpu_uuid, engine_active=ratio)
        else:
            assert isinstance(self.door, SimulatedMetrics)
            self.door.set_engine_active(namespace=namespace, pod=pod, percent=ratio * 100)

    def xid(self, namespace: str, pod: str, code: int) -> None:
        if self.exporter is not None:
            self.exporter.change(self.gpus_of[(namespace, pod)][0], xid=code)
        else:
            assert isinstance(self.door, SimulatedMetrics)
            self.door.set_xid(namespace=namespace, pod=pod, code=code)

    def outage(self, down: bool) -> None:
        if self.exporter is not None:
            self.exporter.available = not down
        else:
            assert isinstance(self.door, SimulatedMetrics)
            self.door.set_outage(down)

    def scraped(self) -> None:
        """Returns once the door holds what was set (Prometheus scraped twice since)."""
        if self.exporter is not None:
            self.exporter.wait_scrapes(2)

    def eventually(self, read: Callable[[], T], check: Callable[[T], bool], *, what: str, timeout: float = 15) -> T:
        """Reads until check(value) holds: at once on the simulated door, within a few scrapes
        and rule evaluations on the real Prometheus."""
        deadline = time.monotonic() + timeout
        while True:
            value = read()
            if check(value):
                return value
            if self.exporter is None or time.monotonic() > deadline:
                raise AssertionError(f"{what} never held on the {self.name} door; last read: {value!r}")
            time.sleep(0.2)


@pytest.fixture(params=["simulated", "prometheus"])
def telemetry(request: Any) -> Iterator[TelemetryUnderTest]:
    if request.param == "prometheus":
        server = request.getfixturevalue("prometheus_server")
        exporter = request.getfixturevalue("dcgm_exporter")
        under_test = TelemetryUnderTest("prometheus", PrometheusMetrics(server.url, timeout=5), exporter)
    else:
        holder: list[TelemetryUnderTest] = []
        door = SimulatedMetrics(pods=lambda: holder[0].pods, clock=time.time)
        under_test = TelemetryUnderTest("simulated", door)
        holder.append(under_test)
    reset_metrics(under_test.door)
    yield under_test
    reset_metrics(None)
    if under_test.exporter is not None:
        under_test.exporter.available = True
        for namespace, _pod in under_test.gpus_of:
            under_test.exporter.remove_namespace(namespace)
