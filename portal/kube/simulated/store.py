"""The simulated cluster's storage: objects as the API server keeps them, and the change log
whose ids are resourceVersions. The API server and the controllers write only through here."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, Min

from portal.kube.base import ObjectRef
from portal.kube.simulated.models import SimulatedEvent, SimulatedObject

EVENTS_KEPT = 5000
# The PostgreSQL advisory lock that takes writes to the simulated cluster one at a time.
WRITE_LOCK = 0x6770_7375  # "gpsu"


def now_iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(self, *, now: Callable[[], float]) -> None:
        self.now = now

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write to the cluster and the controllers' catch-up after it: a transaction, and on
        PostgreSQL one at a time across processes. Two at once each update rows the other updates
        (workloads' and queues' statuses) in their own order, and PostgreSQL ended one of two
        concurrent submissions as a deadlock; the submission then waited for the resubmit pass."""
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [WRITE_LOCK])
            yield

    def get(self, ref: ObjectRef, *, lock: bool = False) -> SimulatedObject | None:
        """The stored row; `lock` holds it until the surrounding transaction ends."""
        rows = SimulatedObject.objects.filter(
            api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace or "", name=ref.name
        )
        return (rows.select_for_update() if lock else rows).first()

    def objects(self, kind: str, namespace: str | None = None, *, api_version: str | None = None) -> list[SimulatedObject]:
        """The objects of a kind, oldest first (the order the controllers act in)."""
        rows = SimulatedObject.objects.filter(kind=kind)
        if api_version is not None:
            rows = rows.filter(api_version=api_version)
        if namespace is not None:
            rows = rows.filter(namespace=namespace)
        return list(rows.order_by("id"))

    def namespace_contents(self, namespace: str) -> list[SimulatedObject]:
        """Everything that lives in a namespace (what deleting it takes along)."""
        return list(SimulatedObject.objects.filter(namespace=namespace).exclude(kind="Namespace").order_by("id"))

    def snapshot(self, kinds: Iterable[str]) -> dict[str, list[SimulatedObject]]:
        """The objects of these kinds as of one moment, so the controllers decide on a consistent view."""
        wanted = list(kinds)
        with transaction.atomic():
            found: dict[str, list[SimulatedObject]] = {kind: [] for kind in wanted}
            for row in SimulatedObject.objects.filter(kind__in=wanted).order_by("id"):
                found[row.kind].append(row)
        return found

    def write(self, ref: ObjectRef, body: dict[str, Any], row: SimulatedObject | None) -> dict[str, Any]:
        """Stores the body as the new state of the object (`row` is what is stored now, if
        anything) and logs the change. Writing what is already stored changes nothing."""
        if row is not None and row.body == body:
            return body
        if row is None:
            body["metadata"].setdefault("uid", str(uuid.uuid4()))
            body["metadata"].setdefault("creationTimestamp", now_iso(self.now()))
            row = SimulatedObject(api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace or "", name=ref.name)
        body["metadata"]["generation"] = body["metadata"].get("generation", 0) + (
            1 if row.pk is None or row.body.get("spec") != body.get("spec") else 0
        )
        event_id = self._record("ADDED" if row.pk is None else "MODIFIED", body)
        body["metadata"]["resourceVersion"] = str(event_id)
        row.body, row.resource_version = body, event_id
        row.save()
        return body

    def remove(self, row: SimulatedObject) -> None:
        self._record("DELETED", row.body)
        row.delete()

    def _record(self, type_: str, body: dict[str, Any]) -> int:
        event = SimulatedEvent.objects.create(
            api_version=body["apiVersion"], kind=body["kind"], namespace=body["metadata"].get("namespace", ""),
            type=type_, body=body,
        )
        return event.id

    # --- The change log ---------------------------------------------------------------------------

    def latest_version(self) -> int:
        return SimulatedEvent.objects.aggregate(latest=Max("id"))["latest"] or 0

    def oldest_version(self) -> int | None:
        """The oldest change still kept; a watch from before it has to list afresh."""
        oldest: int | None = SimulatedEvent.objects.aggregate(oldest=Min("id"))["oldest"]
        return oldest

    def events_after(self, version: int, *, api_version: str, kind: str, namespace: str | None = None) -> list[SimulatedEvent]:
        events = SimulatedEvent.objects.filter(id__gt=version, api_version=api_version, kind=kind)
        if namespace:
            events = events.filter(namespace=namespace)
        return list(events.order_by("id"))

    def trim(self) -> None:
        latest = self.latest_version()
        if latest > EVENTS_KEPT:
            SimulatedEvent.objects.filter(id__lte=latest - EVENTS_KEPT).delete()
