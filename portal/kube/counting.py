"""A gateway that counts what is asked of the one it wraps: for benchmarks and tests, which
want to know how many calls a piece of the portal makes, without the gateways keeping score."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from portal.kube.base import FIELD_MANAGER, Gateway, KindLists, NodeSpec, ObjectRef, WatchEvent

# The methods that are requests to the cluster's API; the hooks (expect_nodes, tick) are not.
API_METHODS = ("apply", "dry_run", "create", "replace", "delete", "get", "list", "watch", "pod_logs",
               "read_subresource")


class CountingGateway:
    """Wraps any gateway; `calls` counts per method, `kinds` per (method, kind), `total` the API calls.

    A call is counted when it is made (a watch when it is opened), whether or not it succeeds.
    Safe to share between threads (the informer's watches, web requests)."""

    def __init__(self, inner: Gateway) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.kinds: Counter[tuple[str, str]] = Counter()
        self._changed = threading.Condition()

    def _count(self, method: str, kind: str = "") -> None:
        with self._changed:
            self.calls[method] += 1
            if kind:
                self.kinds[(method, kind)] += 1
            self._changed.notify_all()

    @property
    def total(self) -> int:
        with self._changed:
            return sum(self.calls[method] for method in API_METHODS)

    def wait_for_calls(self, method: str, kind: str, *, at_least: int, timeout: float) -> bool:
        """Blocks until `method` was called for `kind` at least that often; False when time ran out first."""
        with self._changed:
            return self._changed.wait_for(lambda: self.kinds[(method, kind)] >= at_least, timeout=timeout)

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        self._count("apply", obj.get("kind", ""))
        return self.inner.apply(obj, field_manager=field_manager, force=force)

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        self._count("dry_run", obj.get("kind", ""))
        return self.inner.dry_run(obj, field_manager=field_manager)
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count("create", obj.get("kind", ""))
        return self.inner.create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count("replace", obj.get("kind", ""))
        return self.inner.replace(obj)

    def delete(self, ref: ObjectRef) -> None:
        self._count("delete", ref.kind)
        self.inner.delete(ref)

    def cluster_now(self) -> dt.datetime:
        return self.inner.cluster_now()

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        self._count("get", ref.kind)
        return self.inner.get(ref)

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        self._count("list", kind)
        return self.inner.list(api_version, kind, namespace=namespace, labels=labels, fields=fields)

    def list_kinds(
        self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
    ) -> KindLists:
        for _, kind in kinds:
            self._count("list", kind)
        return self.inner.list_kinds(kinds, labels=labels)

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
        self._count("watch", kind)
        return self.inner.watch(api_version, kind, namespace=namespace, labels=labels, resource_version=resource_version,
                                timeout_seconds=timeout_seconds)

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        self._count("pod_logs", "Pod")
        return self.inner.pod_logs(namespace=namespace, name=name, tail_lines=tail_lines, limit_bytes=limit_bytes)

    def read_subresource(
        self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        self._count("read_subresource", ref.kind)
        return self.inner.read_subresource(ref, subresource, query=query)

    def expect_nodes(self, nodes: Sequence[NodeSpec]) -> None:
        self._count("expect_nodes", "Node")
        self.inner.expect_nodes(nodes)

    def tick(self) -> None:
        self._count("tick")
        self.inner.tick()
