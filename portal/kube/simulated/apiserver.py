"""The API server's part of the simulated cluster: validation, defaults, server-side apply's
merge, get, list, delete with its cascades, and watches.

Each watch is its own stream, as on a real cluster, where every kind comes over its own
connection and nothing orders one kind's events against another's. So that the portal meets
such orders here too, every stream holds each event back by a delay drawn from a random
generator seeded with `SIMULATED_WATCH_SEED` and the stream's kind: the streams interleave
differently from kind to kind, the same way on every run with the same seed. Within one
stream, events keep the order they happened in, as a real watch keeps them.
"""

from __future__ import annotations

import copy
import ipaddress
import random
import re
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from portal.kube.base import (
    FIELD_MANAGER,
    KubeError,
    ObjectRef,
    WatchEvent,
    kind_info,
    ref_of,
)
from portal.kube.simulated.controllers import controllers_reconcile
from portal.kube.simulated.state import JOB_NAME_LABEL, OWNER_LABEL, QUEUED_KINDS, runtime_class_refusal
from portal.kube.simulated.store import Store
from portal.kube.simulated.volcano import PLUGIN_KINDS

DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Fields an apply by the portal owns wholesale; metadata is merged, status belongs to controllers.
SERVER_OWNED = {"status"}
WATCH_POLL_SECONDS = 0.2
# Small enough that the suite does not notice, large enough to reorder events a poll apart.
WATCH_DELAY_MAX_SECONDS = 0.3


def watch_delays(seed: str, api_version: str, kind: str, namespace: str | None = None) -> Iterator[float]:
    """The hold-back of each successive event on one watch stream: the same for the same seed and stream."""
    generator = random.Random(f"{seed}/{api_version}/{kind}/{namespace or ''}")  # an interleaving, not a secret
    while True:
        yield generator.uniform(0, WATCH_DELAY_MAX_SECONDS)


def _matches(body: dict[str, Any], labels: dict[str, str] | None) -> bool:
    have = body["metadata"].get("labels", {})
    return all(have.get(key) == value for key, value in (labels or {}).items())


def _field_value(body: dict[str, Any], path: str) -> str:
    """As the API server reads a field selector: follow the dotted path, compare as text, a missing field is ""."""
    value: Any = body
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _fields_match(body: dict[str, Any], fields: dict[str, str] | None) -> bool:
    return all(_field_value(body, path) == wanted for path, wanted in (fields or {}).items())


def _invalid(ref: ObjectRef, path: str, value: Any, why: str) -> KubeError:
    return KubeError(f"rejected as invalid: {path}: Invalid value: {value!r}: {why}", ref=ref, status=422, reason="Invalid")


SERVICE_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")


def network_policy_check(ref: ObjectRef, body: dict[str, Any]) -> None:
    """What the API server refuses in a NetworkPolicy's peers and ports, and its one default (TCP)."""
    spec = body.get("spec") or {}
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for r, rule in enumerate(spec.get(direction) or []):
            for n, port in enumerate(rule.get("ports") or []):
                path = f"spec.{direction}[{r}].ports[{n}]"
                port.setdefault("protocol", "TCP")
                if port["protocol"] not in ("TCP", "UDP", "SCTP"):
                    raise _invalid(ref, f"{path}.protocol", port["protocol"], 'supported values: "SCTP", "TCP", "UDP"')
                value = port.get("port")
                if isinstance(value, int) and not 1 <= value <= 65535:
                    raise _invalid(ref, f"{path}.port", value, "must be between 1 and 65535, inclusive")
                if isinstance(value, str) and not SERVICE_PORT_NAME.match(value):
                    raise _invalid(ref, f"{path}.port", value, "must be a valid port name")
            for n, peer in enumerate(rule.get(peers_key) or []):
                block = peer.get("ipBlock")
                if block is None:
                    continue
                path = f"spec.{direction}[{r}].{peers_key}[{n}].ipBlock"
                try:
                    cidr = ipaddress.ip_network(block.get("cidr", ""), strict=False)
                except ValueError:
                    raise _invalid(ref, f"{path}.cidr", block.get("cidr"), "must be a valid CIDR value") from None
                for e, text in enumerate(block.get("except") or []):
                    try:
                        cut = ipaddress.ip_network(text, strict=False)
                    except ValueError:
                        raise _invalid(ref, f"{path}.except[{e}]", text, "must be a valid CIDR value") from None
                    if cut.version != cidr.version or cut == cidr or not cut.subnet_of(cidr):  # type: ignore[arg-type]
                        raise _invalid(ref, f"{path}.except[{e}]", text, "must be a strict subset of `cidr`")


# The resources a container may name without a domain; a name with one is a qualified name.
STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _containers(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each container of a pod, or of a Job's, Deployment's or StatefulSet's pod template, with its path."""
    spec = body.get("spec") or {}
    pod, prefix = (spec, "spec") if body.get("kind") == "Pod" else ((spec.get("template") or {}).get("spec") or {},
                                                                      "spec.template.spec")
    for index, container in enumerate(pod.get("containers") or []):
        yield f"{prefix}.containers[{index}]", container


def _container_resources_check(ref: ObjectRef, path: str, container: dict[str, Any]) -> None:
    """As the API server validates a container's resource names (limits first, then requests): a
    name without a domain must be a standard resource, and one with a domain a qualified name."""
    for section in ("limits", "requests"):
        for name in (container.get("resources") or {}).get(section) or {}:
            where = f"{path}.resources.{section}[{name}]"
            if "/" not in name:
                if name not in STANDARD_CONTAINER_RESOURCES and not name.startswith("hugepages-"):
                    raise _invalid(ref, where, name, "must be a standard resource for containers")
                continue
            part = name.split("/", 1)[1]
            if len(part) > 63:
                raise _invalid(ref, where, name, "name part must be no more than 63 bytes")
            if not QUALIFIED_NAME_PART.match(part):
                raise _invalid(ref, where, name, "name part must consist of alphanumeric characters, '-', '_' or '.', "
                               "and must start and end with an alphanumeric character")


def runtime_class_check(ref: ObjectRef, body: dict[str, Any]) -> None:
    """As the API server validates a RuntimeClass: its handler, the CRI runtime it selects, is a DNS-1123 label."""
    handler = body.get("handler")
    if not handler:
        raise _invalid(ref, "handler", handler, "Required value")
    if not isinstance(handler, str) or len(handler) > 63 or not DNS_LABEL.match(handler):
        raise _invalid(ref, "handler", handler, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                                                "characters or '-', and must start and end with an alphanumeric character")


class ApiServer:
    def __init__(self, store: Store, *, watch_seed: str) -> None:
        self.store = store
        self.watch_seed = watch_seed

    def _validate(self, ref: ObjectRef) -> None:
        if not DNS_NAME.match(ref.name) or len(ref.name) > 253:
            raise KubeError(
                f"rejected as invalid: metadata.name: Invalid value: {ref.name!r}: a lowercase RFC 1123 subdomain "
                "must consist of lower case alphanumeric characters, '-' or '.'", ref=ref, status=422, reason="Invalid",
            )
        if ref.info.namespaced:
            if not ref.namespace:
                raise KubeError("rejected as invalid: metadata.namespace: Required value", ref=ref, status=422, reason="Invalid")
            if self.store.get(ObjectRef("v1", "Namespace", ref.namespace)) is None:
                raise KubeError(f'namespaces "{ref.namespace}" not found', ref=ref, status=404, reason="NotFound")

    @staticmethod
    def _defaults(body: dict[str, Any]) -> dict[str, Any]:
        if body["kind"] == "Namespace":
            body["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = body["metadata"]["name"]
            body.setdefault("status", {"phase": "Active"})
        if body["kind"] == "Job" and body["apiVersion"] == "batch/v1":
            body["spec"].setdefault("parallelism", 1)
            body["spec"].setdefault("completions", body["spec"]["parallelism"])
            body["spec"].setdefault("suspend", False)
        if body["kind"] == "ResourceQuota":
            hard = body["spec"].get("hard", {})
            body["status"] = {"hard": dict(hard), "used": dict.fromkeys(hard, "0")}
        return body

    @staticmethod
    def _refuse_immutable_change(ref: ObjectRef, live: dict[str, Any], wanted: dict[str, Any]) -> None:
        """As the API server does: a PriorityClass's value and preemptionPolicy never change in place."""
        if ref.kind != "PriorityClass":
            return
        for name, default in (("value", 0), ("preemptionPolicy", "PreemptLowerPriority")):
            if name in wanted and wanted[name] != live.get(name, default):
                message = "may not be changed in an update." if name == "value" else "field is immutable"
                raise KubeError(f"rejected as invalid: {name}: {message}", ref=ref, status=422, reason="Invalid")

    def _admit(self, ref: ObjectRef, body: dict[str, Any], *, new: bool) -> None:
        """Validation and admission of one object as the API server would store it."""
        if ref.kind == "NetworkPolicy":
            network_policy_check(ref, body)
        if ref.kind == "RuntimeClass":
            runtime_class_check(ref, body)
        if ref.kind == "Pod" and new:
            present = {row.name for row in self.store.objects("RuntimeClass")}
            if refusal := runtime_class_refusal(body, present):
                raise KubeError(refusal, ref=ref, status=403, reason="Forbidden")
        for path, container in _containers(body):
            _container_resources_check(ref, path, container)

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        ref = ref_of(obj)
        self._validate(ref)
        with self.store.writing():
            row = self.store.get(ref, lock=True)
            if row is None:
                body = copy.deepcopy(obj)
                body.setdefault("metadata", {})
            else:
                self._refuse_immutable_change(ref, row.body, obj)
                body = copy.deepcopy(row.body)
                meta = obj.get("metadata", {})
                for key in ("labels", "annotations"):
                    if key in meta:
                        body["metadata"][key] = {**body["metadata"].get(key, {}), **meta[key]}
                for key, value in obj.items():
                    if key not in ("metadata", "apiVersion", "kind") and key not in SERVER_OWNED:
                        body[key] = copy.deepcopy(value)
                if ref.kind == "Node" and "spec" in obj:
                    # A Node is never the portal's: an apply names only the fields it sets (a cordon's
                    # spec.unschedulable), and server-side apply leaves the fields others own.
                    body["spec"] = {**(row.body.get("spec") or {}), **copy.deepcopy(obj["spec"])}
            if ref.info.namespaced:
                body["metadata"]["namespace"] = ref.namespace
            self._admit(ref, body, new=row is None)
            stored = self.store.write(ref, self._defaults(body), row)
            controllers_reconcile(self.store)
        return copy.deepcopy(stored)

    def dry_run(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What apply would store, validated as the API server validates a new object, stored nowhere."""
        ref = ref_of(obj)
        self._validate(ref)
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {})
        if ref.info.namespaced:
            body["metadata"]["namespace"] = ref.namespace
        self._admit(ref, body, new=True)
        return self._defaults(body)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A POST: the object must not exist yet. Only for kinds no controller acts on (Leases)."""
        ref = ref_of(obj)
        self._validate(ref)
        with self.store.writing():
            if self.store.get(ref, lock=True) is not None:
                raise KubeError(f'{ref.info.plural}.{ref.info.group or "core"} "{ref.name}" already exists',
                                ref=ref, status=409, reason="AlreadyExists")
            body = copy.deepcopy(obj)
            body["metadata"].pop("resourceVersion", None)
            if ref.info.namespaced:
                body["metadata"]["namespace"] = ref.namespace
            stored = self.store.write(ref, body, None)
        return copy.deepcopy(stored)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A PUT, refused with 409 when the object moved past the resourceVersion it names. One
        naming none is unconditional, and creates a missing object, as the API server does for
        Leases."""
        ref = ref_of(obj)
        self._validate(ref)
        with self.store.writing():
            row = self.store.get(ref, lock=True)
            wanted = obj["metadata"].get("resourceVersion")
            if row is None and not wanted:  # as for Leases (AllowCreateOnUpdate), an unconditional PUT creates
                body = copy.deepcopy(obj)
                if ref.info.namespaced:
                    body["metadata"]["namespace"] = ref.namespace
                return copy.deepcopy(self.store.write(ref, body, None))
            if row is None:
                raise KubeError(f'{ref.info.plural}.{ref.info.group or "core"} "{ref.name}" not found',
                                ref=ref, status=404, reason="NotFound")
            if wanted and str(wanted) != str(row.resource_version):
                raise KubeError("conflict: the object has been modified; please apply your changes to the latest "
                                "version and try again", ref=ref, status=409, reason="Conflict")
            body = copy.deepcopy(obj)
            for key in ("uid", "creationTimestamp", "generation"):
                if key in row.body["metadata"]:
                    body["metadata"][key] = row.body["metadata"][key]
            body["metadata"]["resourceVersion"] = row.body["metadata"].get("resourceVersion")
            if ref.info.namespaced:
                body["metadata"]["namespace"] = ref.namespace
            stored = self.store.write(ref, body, row)
        return copy.deepcopy(stored)

    def delete(self, ref: ObjectRef) -> None:
        with self.store.writing():
            row = self.store.get(ref, lock=True)
            if row is None:
                return
            if ref.kind == "Namespace":
                for child in self.store.namespace_contents(ref.name):
                    self.store.remove(child)
            if ref.kind in QUEUED_KINDS:
                # The garbage collector's part: what the workload owns goes with it (a Volcano
                # Job's PodGroup too, and what its plugins made).
                for pod in self.store.objects("Pod", ref.namespace or ""):
                    if pod.body["metadata"].get("labels", {}).get(OWNER_LABEL) == ref.name:
                        self.store.remove(pod)
                uid = row.body["metadata"].get("uid")
                for kind in ("PodGroup", *PLUGIN_KINDS):
                    for owned in self.store.objects(kind, ref.namespace or ""):
                        if any(owner.get("uid") == uid for owner in owned.body["metadata"].get("ownerReferences") or []):
                            self.store.remove(owned)
                for workload in self.store.objects("Workload", ref.namespace or ""):
                    if workload.body["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == ref.name:
                        self.store.remove(workload)
            self.store.remove(row)
            controllers_reconcile(self.store)

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        row = self.store.get(ref)
        return copy.deepcopy(row.body) if row else None

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        kind_info(api_version, kind)
        rows = sorted(self.store.objects(kind, namespace or None, api_version=api_version), key=lambda r: (r.namespace, r.name))
        items = [row.body for row in rows if _matches(row.body, labels) and _fields_match(row.body, fields)]
        return items, str(self.store.latest_version())

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
        deadline = time.monotonic() + timeout_seconds
        since = int(resource_version) if resource_version else None
        delays = watch_delays(self.watch_seed, api_version, kind, namespace)
        held: deque[tuple[float, WatchEvent]] = deque()  # (when it is due, the event), in the order they happened
        while True:
            oldest = self.store.oldest_version()
            if since is None or (oldest is not None and since < oldest - 1):
                items, latest = self.list(api_version, kind, namespace=namespace, labels=labels)
                held.clear()  # the list already holds whatever they said
                yield WatchEvent("RELISTED", {"items": items})
                since = int(latest)
            polled = time.monotonic()
            for event in self.store.events_after(since, api_version=api_version, kind=kind, namespace=namespace):
                since = event.id
                if _matches(event.body, labels):
                    due = polled + next(delays)
                    held.append((max(due, held[-1][0]) if held else due, WatchEvent(event.type, event.body)))
            while held and held[0][0] <= time.monotonic():
                yield held.popleft()[1]
            now = time.monotonic()
            if now >= deadline:
                return
            wake = min(polled + WATCH_POLL_SECONDS, held[0][0] if held else deadline, deadline)
            time.sleep(max(wake - now, 0))
