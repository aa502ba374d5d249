"""Watch-kept copies of cluster objects, for processes that would otherwise list them again and
again.

`follow` is the one loop that keeps a watch going for as long as a process runs: each round
starts from a fresh list (the gateway's RELISTED event), so nothing is missed between rounds or
after a failure. `KindStore` keeps the objects of some kinds that way. Either is a cache: the
watches of different kinds deliver in no common order, and what it holds may have changed a
moment ago, so a caller confirms with a direct read before any verdict that writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection

from portal.kube.base import ObjectRef, WatchEvent, ref_of
from portal.kube.select import gateway

log = logging.getLogger(__name__)


def follow(
    api_version: str, kind: str, labels: dict[str, str] | None, deliver: Callable[[WatchEvent], None],
    *, stopping: threading.Event, watch_seconds: int = 300,
) -> None:
    """Hands every event of one kind's watch to `deliver` until `stopping` is set, starting over
    from a list after each round and after any failure. Meant to be a thread's target."""
    try:
        while not stopping.is_set():
            try:
                # No resourceVersion: each round starts from a list, so nothing is missed between rounds.
                for event in gateway().watch(api_version, kind, labels=labels, timeout_seconds=watch_seconds):
                    if stopping.is_set():
                        return
                    deliver(event)
            except Exception as error:  # noqa: BLE001 - a watcher must outlive any one failure
                if stopping.is_set():
                    return
                log.warning("watch of %s failed, starting over: %s", kind, error)
                stopping.wait(1)
    finally:
        connection.close()  # the simulated cluster reads the database from this thread


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
