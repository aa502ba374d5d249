"""The simulated cluster behind the gateway interface: the API server over the store, with the
controllers catching up after every write and on every tick. Time advances only when `tick()`
runs (or a test calls `advance()`)."""

from __future__ import annotations

import copy
import datetime as dt
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from portal.kube.base import FIELD_MANAGER, KindLists, NodeSpec, ObjectRef, WatchEvent
from portal.kube.dra import RESOURCE_API
from portal.kube.simulated.apiserver import ApiServer
from portal.kube.simulated.controllers import controllers_reconcile
from portal.kube.simulated.kubelet import pod_logs
from portal.kube.simulated.kueue import VISIBILITY, Kueue
from portal.kube.simulated.state import ClusterState
from portal.kube.simulated.store import Store

# What a simulated node offers besides its GPUs, so CPU and memory never decide placement.
NODE_BASE_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110"}


SIMULATED_SLICE_LABEL = "gpu-portal.io/simulated-slice"


class SimulatedGateway:
    def __init__(self, *, clock: Callable[[], float] = time.time, watch_seed: str | None = None) -> None:
        self.clock = clock
        self.offset = 0.0
        self.store = Store(now=self.now)
        self.api = ApiServer(self.store, watch_seed=settings.SIMULATED_WATCH_SEED if watch_seed is None else watch_seed)
        # Whether this cluster serves Kueue's visibility API; a test turns it off to see the
        # portal fall back to its own estimate, as on a cluster without it.
        self.serves_visibility = True

    def now(self) -> float:
        return self.clock() + self.offset

    def cluster_now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now(), tz=dt.UTC)

    def advance(self, seconds: float) -> None:
        """Moves the simulated clock forward (tests), then lets the controllers catch up."""
        self.offset += seconds
        self.tick()

    # --- The gateway ------------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        return self.api.apply(obj, field_manager=field_manager, force=force)

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        return self.api.dry_run(obj)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.api.create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.api.replace(obj)

    def delete(self, ref: ObjectRef) -> None:
        self.api.delete(ref)

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self.api.get(ref)

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        return self.api.list(api_version, kind, namespace=namespace, labels=labels, fields=fields)

    def list_kinds(
        self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
    ) -> KindLists:
        # One after another: its reads are the database's, which another thread would read
        # outside the caller's transaction.
        return {(api_version, kind): self.list(api_version, kind, labels=labels)[0] for api_version, kind in kinds}

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[WatchEvent]:
        return self.api.watch(api_version, kind, namespace=namespace, labels=labels, resource_version=resource_version,
                              timeout_seconds=timeout_seconds)

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        text = pod_logs(self.store.get(ObjectRef("v1", "Pod", name, namespace)), name=name, tail_lines=tail_lines)
        # As the API server does: the first limit_bytes of what it would send, cut mid-line if need be.
        return text if limit_bytes is None else text.encode()[:limit_bytes].decode(errors="replace")

    def read_subresource(
        self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """The aggregated APIs this cluster serves: Kueue's visibility API (pending workloads of a
        ClusterQueue), as Kueue's visibility server answers it."""
        if (ref.api_version, ref.kind, subresource) != (VISIBILITY, "ClusterQueue", "pendingworkloads"):
            return None
        if not self.serves_visibility:
            return None
        with transaction.atomic():
            return {"items": Kueue(ClusterState.read(self.store)).pending_workloads(ref.name)}

    def expect_nodes(self, nodes: Sequence[NodeSpec]) -> None:
        """Makes the simulated nodes exactly these: the catalog's, or a test's."""
        with self.store.writing():
            wanted = {node.name: node for node in nodes}
            for stale in self.store.objects("Node"):
                if stale.name not in wanted:
                    self.store.remove(stale)
            for name, node in wanted.items():
                ref = ObjectRef("v1", "Node", name)
                row = self.store.get(ref, lock=True)
                body: dict[str, Any] = (
                    copy.deepcopy(row.body) if row else {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                )
                body["metadata"]["labels"] = {"kubernetes.io/hostname": name, "type": "simulated", **node.labels}
                cordoned = (body.get("spec") or {}).get("unschedulable")  # a cordon outlives the catalog's nodes being remade
                body["spec"] = {"taints": [dict(taint) for taint in node.taints]} if node.taints else {}
                if cordoned:
                    body["spec"]["unschedulable"] = True
                allocatable = {**NODE_BASE_ALLOCATABLE, **{k: str(v) for k, v in node.allocatable.items()}}
                capacity = {**allocatable, **{k: str(v) for k, v in (node.capacity or {}).items()}}
                body["status"] = {"allocatable": allocatable, "capacity": capacity,
                                  "conditions": [{"type": "Ready", "status": "True", "reason": "SimulatedKubelet"}]}
                self.store.write(ref, body, row)
            self._publish_devices(nodes)
            controllers_reconcile(self.store)

    def _publish_devices(self, nodes: Sequence[NodeSpec]) -> None:
        """What a DRA driver's plugin on each node publishes: a ResourceSlice of its devices (and the
        driver's chart, its DeviceClass, named after the driver). Only the slices made here are remade."""
        wanted: dict[str, dict[str, Any]] = {}
        for node in nodes:
            for driver, count in node.devices.items():
                name = f"{node.name}-{driver}"
                wanted[name] = {
                    "apiVersion": RESOURCE_API, "kind": "ResourceSlice",
                    "metadata": {"name": name, "labels": {SIMULATED_SLICE_LABEL: "true"}},
                    "spec": {"driver": driver, "nodeName": node.name,
                             "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                             "devices": [{"name": f"gpu-{index}"} for index in range(count)]},
                }
                device_class = ObjectRef(RESOURCE_API, "DeviceClass", driver)
                if self.store.get(device_class) is None:
                    self.store.write(device_class, {
                        "apiVersion": RESOURCE_API, "kind": "DeviceClass", "metadata": {"name": driver},
                        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}, None)
        for row in self.store.objects("ResourceSlice", api_version=RESOURCE_API):
            if (row.body["metadata"].get("labels") or {}).get(SIMULATED_SLICE_LABEL) and row.name not in wanted:
                self.store.remove(row)
        for name, body in wanted.items():
            ref = ObjectRef(RESOURCE_API, "ResourceSlice", name)
            self.store.write(ref, body, self.store.get(ref, lock=True))

    def tick(self) -> None:
        """The controllers catch up with the clock (pods finish, queues admit); old changes are forgotten."""
        with self.store.writing():
            controllers_reconcile(self.store)
            self.store.trim()
