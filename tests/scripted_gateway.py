"""A gateway that fails as scripted, in front of the simulated cluster.

Tasks are tested against it to see what they do when the cluster refuses (4xx) or stays
unavailable (5xx) after the gateway's own retries: it is a cluster that answers badly, not a
mock of the client, and every call it does not fail reaches the simulated cluster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

from portal.kube import FIELD_MANAGER, Gateway, KubeError, NodeSpec, ObjectRef, WatchEvent
from portal.kube.base import KindLists
from portal.kube.simulated import SimulatedGateway


def refusal(message: str = "rejected as invalid: spec.cohortName: Invalid value", status: int = 422) -> KubeError:
    return KubeError(message, status=status, reason="Invalid")


def unavailable(message: str = "etcdserver: request timed out", status: int = 503) -> KubeError:
    return KubeError(message, status=status, reason="ServiceUnavailable")


class ScriptedGateway:
    """Raises the scripted errors, one per write (apply, create, replace or delete), in order (None lets that
    write through); then lets writes through. `always` fails every write with the same error. Reads always go through."""

    def __init__(self, cluster: SimulatedGateway, *errors: Exception | None, always: Exception | None = None) -> None:
        self.cluster, self.errors, self.always = cluster, list(errors), always
        self.attempts = 0  # writes tried, failed or not
        self.writes: list[str] = []  # what each was: "apply", "create", "replace" or "delete"
        self.failures = 0

    def _write(self, what: str) -> None:
        self.attempts += 1
        self.writes.append(what)
        error = self.errors.pop(0) if self.errors else self.always
        if error is not None:
            self.failures += 1
            raise error

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        self._write("apply")
        return self.cluster.apply(obj, field_manager=field_manager, force=force)

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        return self.cluster.dry_run(obj, field_manager=field_manager)  # stores nothing: not a write

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._write("create")
        return self.cluster.create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._write("replace")
        return self.cluster.replace(obj)

    def delete(self, ref: ObjectRef) -> None:
        self._write("delete")
        self.cluster.delete(ref)

    def cluster_now(self) -> dt.datetime:
        return self.cluster.cluster_now()

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self.cluster.get(ref)

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        return self.cluster.list(api_version, kind, namespace=namespace, labels=labels, fields=fields)

    def list_kinds(
        self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
    ) -> KindLists:
        return self.cluster.list_kinds(kinds, labels=labels)

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
        return self.cluster.watch(api_version, kind, namespace=namespace, labels=labels,
                                  resource_version=resource_version, timeout_seconds=timeout_seconds)

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        return self.cluster.pod_logs(namespace=namespace, name=name, tail_lines=tail_lines, limit_bytes=limit_bytes)

    def read_subresource(self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return self.cluster.read_subresource(ref, subresource, query=query)

    def expect_nodes(self, nodes: Sequence[NodeSpec]) -> None:
        self.cluster.expect_nodes(nodes)

    def tick(self) -> None:
        self.cluster.tick()


def _implements_the_gateway(scripted: ScriptedGateway) -> Gateway:
    return scripted  # mypy checks here that ScriptedGateway keeps up with the Protocol
