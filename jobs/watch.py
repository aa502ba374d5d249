"""The low-latency half of the status sync: watches keep a cache of the objects the sync reads,
and each change re-derives just the workloads it touches. The periodic full pass
(jobs.sync.sync_all) stays as the safety net for anything a watch could miss.

Each kind has its own watch, and watches of different kinds deliver in no common order: the
caches are never one instant of the cluster. The sync is built for that (jobs.sync): what a
lagging cache lacks is never taken as gone."""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection

from jobs.sync import (
    Key,
    Snapshot,
    SyncResult,
    owner_kind_names,
    read_namespaces,
    read_per_namespace,
    sync_snapshot,
    watched,
)
from portal.adapters import whole_number
from portal.kube import WatchEvent
from portal.kube.store import NamespacedFollow, follow, unmanaged

ObjectKey = tuple[str, str]  # (namespace, name)


class WorkloadInformer:
    def __init__(self, *, watch_seconds: int = 300, batch_seconds: float = 0.05,
                 fence: Callable[[], None] | None = None, namespaces_seconds: float = 10.0) -> None:
        # Called before each write; raises once this process may no longer write (portal.leader).
        self.fence = fence
        self.kinds = watched()  # the site's queue backend's among them, as it was when the informer began
        self.store: dict[str, dict[ObjectKey, dict[str, Any]]] = {kind: {} for _, kind, _ in self.kinds}
        # The store's keys by kind and namespace: a batch indexes only the namespaces it touches
        # (all of a workload's objects live in its team's), not every object the store holds.
        self.namespaces: dict[str, defaultdict[str, set[ObjectKey]]] = {kind: defaultdict(set) for _, kind, _ in self.kinds}
        # (kind, event, when it arrived): the arrival is the portal's own clock, for the status lag.
        self.events: queue.Queue[tuple[str, WatchEvent, float]] = queue.Queue()
        # Seconds from the first watch event of a batch that changed a workload to the commit
        # that shows the change: the status lag on the portal's side, exact to the batch.
        self.lags: deque[float] = deque(maxlen=100_000)
        self.stopping = threading.Event()
        self.watch_seconds = watch_seconds
        self.batch_seconds = batch_seconds
        self.ready = {kind: threading.Event() for _, kind, _ in self.kinds}
        # Workloads touched before every kind was listed once: synced as soon as all are.
        self.pending: set[Key] = set()
        self.threads: list[threading.Thread] = []
        # The kinds watched per team namespace (PORTAL_NAMESPACED_READS), which ask every
        # `namespaces_seconds` which teams have workloads to follow (jobs.sync.workload_namespaces):
        # a team's first launch is watched that soon, and the full pass covers it meanwhile.
        self.followed: dict[str, NamespacedFollow] = {}
        self.namespaces_seconds = namespaces_seconds

    def _arrived(self, kind: str) -> Callable[[WatchEvent], None]:
        return lambda event: self.events.put((kind, event, time.time()))

    @staticmethod
    def _namespaces(kind: str) -> Callable[[], list[str]]:
        return lambda: read_namespaces(kind) or []

    def start(self) -> None:
        for api_version, kind, labels in self.kinds:
            if not read_per_namespace(kind):
                thread = threading.Thread(
                    target=follow, args=(api_version, kind, labels, self._arrived(kind)),
                    kwargs={"stopping": self.stopping, "watch_seconds": self.watch_seconds}, daemon=True,
                    name=f"watch-{kind}",
                )
            else:
                # A watch per team namespace, started and stopped as teams come and go; its
                # namespaces' first lists make the kind ready.
                followed = self.followed[kind] = NamespacedFollow(
                    api_version, kind, labels, self._arrived(kind), namespaces=self._namespaces(kind),
                    stopping=self.stopping, watch_seconds=self.watch_seconds, every=self.namespaces_seconds)
                self.ready[kind] = followed.listed
                thread = threading.Thread(target=followed.run, daemon=True, name=f"watch-{kind}-namespaces")
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()

    def _apply(self, kind: str, event: WatchEvent) -> set[Key]:
        """Updates the cache; returns the workloads the change may concern."""
        store, namespaces = self.store[kind], self.namespaces[kind]
        if event.type == "RELISTED" and "namespace" in event.object:
            # One namespace's list (a kind followed per team namespace): it replaces that namespace only.
            changed = [store.pop(key) for key in namespaces.pop(event.object["namespace"], set())]
            items = event.object.get("items", [])
            for item in items:
                key = (item["metadata"].get("namespace", ""), item["metadata"]["name"])
                store[key] = unmanaged(item)
                namespaces[key[0]].add(key)
            return self._keys([*changed, *items])
        if event.type == "RELISTED":
            before = set(store)
            changed = list(store.values())
            store.clear()
            namespaces.clear()
            for item in event.object.get("items", []):
                key = (item["metadata"].get("namespace", ""), item["metadata"]["name"])
                store[key] = unmanaged(item)
                namespaces[key[0]].add(key)
            self.ready[kind].set()
            self._pods_follow(kind, {key for key in store if key not in before})
            return self._keys([*changed, *store.values()])
        obj = event.object
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if event.type != "DELETED" and key not in store:
            self._pods_follow(kind, {key})
        if event.type == "DELETED":
            store.pop(key, None)
            keys = namespaces.get(key[0])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del namespaces[key[0]]  # a deleted team's namespace leaves nothing behind
        else:
            store[key] = unmanaged(obj)
            namespaces[key[0]].add(key)
        return self._keys([obj])

    def _pods_follow(self, kind: str, new: set[ObjectKey]) -> None:
        """A workload's owner (a kind's, jobs/kinds/) seen for the first time: its pods come
        next, so where pods are watched per namespace, its namespace is watched now rather than
        at the next turn of the namespaces' follow (a watch round's list may bring it, as well as
        an ADDED event)."""
        if kind not in owner_kind_names() or not self.followed:
            return
        for namespace in sorted({namespace for namespace, _ in new}):
            for followed in self.followed.values():
                followed.ensure(namespace)

    def _keys(self, objects: list[dict[str, Any]]) -> set[Key]:
        keys: set[Key] = set()
        for obj in objects:
            namespace = obj["metadata"].get("namespace", "")
            workload_id = whole_number(obj["metadata"].get("labels", {}).get("gpu-portal.io/workload", ""))
            if workload_id is not None:
                keys.add((namespace, workload_id))
            for owner in obj["metadata"].get("ownerReferences", []):  # the queue backend's objects (Kueue's Workloads)
                owned = self.store.get(owner["kind"], {}).get((namespace, owner["name"]))
                workload_id = whole_number((owned or {}).get("metadata", {}).get("labels", {}).get("gpu-portal.io/workload", ""))
                if workload_id is not None:
                    keys.add((namespace, workload_id))
        return keys

    def run(self, *, until: Callable[[], bool] | None = None, on_sync: Callable[[SyncResult], None] | None = None) -> None:
        """Applies events in small batches and syncs the workloads they touch, until stopped."""
        self.start()
        try:
            while not self.stopping.is_set() and not (until and until()):
                try:
                    batch = [self.events.get(timeout=0.5)]
                except queue.Empty:
                    continue
                deadline = time.monotonic() + self.batch_seconds
                while time.monotonic() < deadline:
                    try:
                        batch.append(self.events.get(timeout=max(deadline - time.monotonic(), 0)))
                    except queue.Empty:
                        break
                close_old_connections()
                result = self.handle([(kind, event) for kind, event, _ in batch])
                if result is not None and result.changed:
                    self.lags.append(time.time() - min(arrived for _, _, arrived in batch))
                if result is not None and on_sync:
                    on_sync(result)
        finally:
            self.stop()
            connection.close()  # this thread's own: a thread that ran the informer leaves none open

    def handle(self, batch: list[tuple[str, WatchEvent]]) -> SyncResult | None:
        """Applies a batch of events to the caches and syncs the workloads they touch, once every
        kind has been listed (before that, a missing kind would say nothing about anything)."""
        for kind, event in batch:
            self.pending |= self._apply(kind, event)
        if not self.pending or not all(ready.is_set() for ready in self.ready.values()):
            return None
        touched, self.pending = self.pending, set()
        spaces = {namespace for namespace, _ in touched}
        snapshot = Snapshot.of({kind: [objects[key] for space in spaces for key in self.namespaces[kind].get(space, ())]
                                for kind, objects in self.store.items()}, touched)
        return sync_snapshot(snapshot, touched, fence=self.fence)
