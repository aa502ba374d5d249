"""Watch-kept copies of cluster objects, for processes that would otherwise list them again and
again.

`follow` is the one loop that keeps a watch going for as long as a process runs: each round
starts from a fresh list (the gateway's RELISTED event), so nothing is missed between rounds or
after a failure. `NamespacedFollow` keeps one going per team namespace for a kind the portal may
read only there, and `list_each` lists such a kind namespace by namespace. `KindStore` keeps the
objects of some kinds that way. Either is a cache: the
watches of different kinds deliver in no common order, and what it holds may have changed a
moment ago, so a caller confirms with a direct read before any verdict that writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection

from portal.kube.base import KubeError, ObjectRef, WatchEvent, ref_of
from portal.kube.select import gateway

log = logging.getLogger(__name__)


# After a failed round a watch starts over in 1 s, then 2, 4... up to this: a namespace the
# portal may not read (yet) is asked again now and then, not every second.
RETRY_MOST_SECONDS = 30


def follow(
    api_version: str, kind: str, labels: dict[str, str] | None, deliver: Callable[[WatchEvent], None],
    *, stopping: threading.Event, watch_seconds: int = 300, namespace: str | None = None,
    failed: Callable[[Exception], None] | None = None,
) -> None:
    """Hands every event of one kind's watch (in one namespace, or across the cluster) to
    `deliver` until `stopping` is set, starting over from a list after each round and after any
    failure, which `failed` hears of. Meant to be a thread's target."""
    failures = 0
    try:
        while not stopping.is_set():
            try:
                # No resourceVersion: each round starts from a list, so nothing is missed between rounds.
                for event in gateway().watch(api_version, kind, namespace=namespace, labels=labels,
                                             timeout_seconds=watch_seconds):
                    if stopping.is_set():
                        return
                    if event.type == "RELISTED":
                        failures = 0
                    deliver(event)
            except Exception as error:  # noqa: BLE001 - a watcher must outlive any one failure
                if stopping.is_set():
                    return
                failures += 1
                log.warning("watch of %s%s failed, starting over: %s", kind, f" in {namespace}" if namespace else "", error)
                if failed is not None:
                    failed(error)
                stopping.wait(min(2 ** (failures - 1), RETRY_MOST_SECONDS))
    finally:
        connection.close()  # the simulated cluster reads the database from this thread


class NamespacedFollow:
    """One kind followed namespace by namespace, for a portal that may read it only in the teams'
    namespaces (PORTAL_NAMESPACED_READS): a `follow` thread per namespace `namespaces()` names,
    asked again every `every` seconds, so a watch starts for a namespace newly named (or at once,
    through `ensure`) and stops for one no longer named.

    Each namespace's RELISTED event carries that "namespace" beside its items, so a consumer
    replaces only that namespace's objects; a namespace no longer followed is delivered as one
    with no items. `listed` is set once each namespace first named has been listed or has failed
    once (one the portal may not read yet must not hold up every other). `run` is a thread's target."""

    def __init__(self, api_version: str, kind: str, labels: dict[str, str] | None, deliver: Callable[[WatchEvent], None],
                 *, namespaces: Callable[[], Iterable[str]], stopping: threading.Event, watch_seconds: int = 300,
                 every: float = 30.0) -> None:
        self.api_version, self.kind, self.labels, self.deliver = api_version, kind, labels, deliver
        self.namespaces, self.stopping, self.watch_seconds, self.every = namespaces, stopping, watch_seconds, every
        self.listed = threading.Event()
        self._heard_lock = threading.Lock()
        self._unheard: set[str] | None = None  # of the first namespaces named, those not yet listed or failed
        self._lock = threading.Lock()  # guards running and ensured: `ensure` comes from another thread
        self.running: dict[str, threading.Event] = {}  # namespace -> its watch's own stop
        self._ensured: dict[str, float] = {}  # namespace -> when `ensure` started it

    def _heard(self, namespace: str) -> None:
        with self._heard_lock:
            if self._unheard is not None:
                self._unheard.discard(namespace)
                if not self._unheard:
                    self.listed.set()

    def _deliverer(self, namespace: str) -> Callable[[WatchEvent], None]:
        def deliver(event: WatchEvent) -> None:
            if event.type == "RELISTED":
                event = WatchEvent("RELISTED", {**event.object, "namespace": namespace})
            self.deliver(event)
            if event.type == "RELISTED":
                self._heard(namespace)
        return deliver

    def _start(self, namespace: str) -> None:
        """Starts following `namespace`; the caller holds the lock."""
        stop = self.running[namespace] = threading.Event()
        threading.Thread(
            target=follow, args=(self.api_version, self.kind, self.labels, self._deliverer(namespace)),
            kwargs={"stopping": stop, "watch_seconds": self.watch_seconds, "namespace": namespace,
                    "failed": lambda _error: self._heard(namespace)},
            daemon=True, name=f"watch-{self.kind}-{namespace}",
        ).start()

    def ensure(self, namespace: str) -> None:
        """Follows `namespace` now rather than at the next turn: what comes there next (a new
        Job's pods) is watched from the start. A namespace not named by then is stopped again."""
        with self._lock:
            if namespace not in self.running and not self.stopping.is_set():
                self._ensured[namespace] = time.monotonic()
                self._start(namespace)

    def converge(self) -> None:
        """Starts a watch for each namespace named and not followed, stops those no longer named."""
        asked = time.monotonic()
        wanted = set(self.namespaces())
        with self._heard_lock:
            if self._unheard is None:
                self._unheard = set(wanted)
                if not wanted:
                    self.listed.set()
        with self._lock:
            for namespace in sorted(wanted - set(self.running)):
                self._start(namespace)
            # One `ensure` started after the names were read is newer than they are: kept for the next turn.
            gone = sorted(namespace for namespace in set(self.running) - wanted
                          if self._ensured.get(namespace, 0.0) < asked)
            for namespace in gone:
                self.running.pop(namespace).set()
                self._ensured.pop(namespace, None)
        for namespace in gone:
            self.deliver(WatchEvent("RELISTED", {"items": [], "namespace": namespace}))
            self._heard(namespace)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self.converge()
                except Exception as error:  # noqa: BLE001 - asked again at the next turn
                    log.warning("could not read which namespaces to watch %s in: %s", self.kind, error)
                finally:
                    connection.close()  # namespaces() reads the database from this thread
                self.stopping.wait(self.every)
        finally:
            with self._lock:
                for stop in self.running.values():
                    stop.set()


def list_each(api_version: str, kind: str, *, namespaces: Iterable[str] | None,
              labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The objects of a kind matching `labels`: one list across the cluster (`namespaces` None),
    or one per namespace. A namespace the portal may not read (403: made a moment ago, before its
    RoleBinding is in force) or that is gone (404) is left out, as a cache that has not caught up
    leaves it out: to the status sync, absence proves nothing."""
    cluster = gateway()
    if namespaces is None:
        return cluster.list(api_version, kind, labels=labels)[0]
    found: list[dict[str, Any]] = []
    for namespace in namespaces:
        try:
            found += cluster.list(api_version, kind, namespace=namespace, labels=labels)[0]
        except KubeError as error:
            if error.status not in (403, 404):
                raise
            log.info("%s in %s left out of this pass: %s", kind, namespace, error)
    return found


class KindStore:
    """The current objects of `kinds` matching `labels`, kept by one watch thread per kind.

    `snapshot()` answers None until every kind has been listed once (before that, a kind's
    absence would say nothing). `managedFields` are dropped as objects arrive: nobody reads them
    from a store, and they were half of every object's size."""

    def __init__(self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
                 watch_seconds: int = 300) -> None:
        self.kinds = tuple(kinds)
        self.labels = labels
        self.watch_seconds = watch_seconds
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], dict[ObjectRef, dict[str, Any]]] = {kind: {} for kind in self.kinds}
        self._listed = {kind: threading.Event() for kind in self.kinds}
        self.threads: list[threading.Thread] = []

    def start(self) -> KindStore:
        for api_version, kind in self.kinds:
            thread = threading.Thread(
                target=follow, args=(api_version, kind, self.labels, self._deliverer(api_version, kind)),
                kwargs={"stopping": self.stopping, "watch_seconds": self.watch_seconds},
                daemon=True, name=f"store-{kind}",
            )
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        self.stopping.set()

    def wait_listed(self, timeout: float | None = None) -> bool:
        """Whether every kind was listed within `timeout` seconds."""
        return all(listed.wait(timeout) for listed in self._listed.values())

    def _deliverer(self, api_version: str, kind: str) -> Callable[[WatchEvent], None]:
        return lambda event: self.deliver(api_version, kind, event)

    def deliver(self, api_version: str, kind: str, event: WatchEvent) -> None:
        """Takes one watch event of (api_version, kind) into the store."""
        objects = self._objects[(api_version, kind)]
        with self._lock:
            if event.type == "RELISTED":
                objects.clear()
                for item in event.object.get("items", []):
                    objects[ref_of(_kept(item, api_version, kind))] = item
                self._listed[(api_version, kind)].set()
            elif event.type == "DELETED":
                objects.pop(ref_of(_kept(event.object, api_version, kind)), None)
            else:
                objects[ref_of(_kept(event.object, api_version, kind))] = event.object

    def snapshot(self) -> dict[ObjectRef, dict[str, Any]] | None:
        """Every object held, by reference (the objects themselves are shared: do not change
        them), or None while a kind has not been listed yet."""
        if not all(listed.is_set() for listed in self._listed.values()):
            return None
        with self._lock:
            return {ref: obj for objects in self._objects.values() for ref, obj in objects.items()}

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())


def unmanaged(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without `metadata.managedFields`, in place: nobody reads them from a cache, and
    they were a third to a half of each object a watch delivers."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _kept(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The object as a store keeps it: its apiVersion and kind filled in (lists leave them out of
    items) and without managedFields."""
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    return unmanaged(obj)
