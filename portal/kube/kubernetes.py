"""The gateway to a real cluster.

The `kubernetes` client loads the configuration (in-cluster, or a kubeconfig and context) and
keeps the TLS connection pool; requests go straight to the REST paths with plain dict bodies.
The generated model classes are avoided on purpose: in the 37.x client they drop the fraction
of high-precision timestamps, which the server then rejects, and their discovery costs calls.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import urllib3
from django.conf import settings
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from portal.backoff import backoff_delay, jittered
from portal.kube.base import (
    FIELD_MANAGER,
    KindLists,
    KubeError,
    NodeSpec,
    ObjectRef,
    WatchEvent,
    kind_info,
    label_selector,
    ref_of,
)

log = logging.getLogger(__name__)

RETRIABLE_STATUS = {429, 500, 502, 503, 504}
# The longest Retry-After the gateway waits out itself, holding a web request or a worker.
RETRY_AFTER_MAX = 10
LIST_PAGE = 500
# Lists asked at once by `list_kinds`, each holding a connection of the pool (32).
LIST_THREADS = 10


class TokenBucket:
    """The client-side rate limit the Python client lacks: `qps` on average, `burst` at once.
    The clock and sleep are parameters so that tests can drive the bucket without waiting."""

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.qps, self.burst = qps, burst
        self.clock, self.sleep = clock, sleep
        self.tokens = float(burst)
        self.updated = clock()
        self.lock = threading.Lock()

    def take(self) -> None:
        with self.lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.qps)
            self.updated = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            wait = (1 - self.tokens) / self.qps
            self.tokens = 0
            self.updated = now + wait
        self.sleep(wait)


def _status_message(status: int, body: bytes) -> tuple[str, str]:
    """The API server's Status, turned into a sentence: which fields are wrong and why."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        text = body.decode(errors="replace")[:300] if body else ""
        return (text or f"HTTP {status}"), ""
    reason = data.get("reason", "")
    causes = (data.get("details") or {}).get("causes") or []
    if status == 422 and causes:
        message = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".lstrip(": ") for c in causes)
        return f"rejected as invalid: {message}", reason
    if status == 409:
        return f"conflict: {data.get('message', '')}", reason
    return data.get("message") or f"HTTP {status}", reason


def _quota_bookkeeping_conflict(status: int, body: bytes, ref: ObjectRef | None) -> bool:
    """A 409 about a ResourceQuota when the request was for something else: the quota admission
    plugin lost an optimistic-concurrency race updating the namespace's usage while several pods
    or Jobs were created at once. Nothing about the object sent was wrong, and the same request
    succeeds once retried, so it is transient; a conflict on the object itself stays a refusal."""
    if status != 409 or (ref is not None and ref.kind == "ResourceQuota"):
        return False
    try:
        details = json.loads(body).get("details") or {}
    except (ValueError, TypeError, AttributeError):
        return False
    return details.get("kind") == "resourcequotas"


def _backoff(attempt: int) -> float:
    return backoff_delay(attempt - 1, base=0.1, most=5.0)


def _retry_delay(attempt: int, retry_after: str | None) -> float | None:
    """Seconds to wait before the next attempt, or None to stop retrying here. A server that
    says when to come back (Retry-After) is not called earlier; one that asks for longer than a
    caller should be kept waiting gets its answer, still retriable, and the task retries later."""
    if retry_after and retry_after.isdigit():
        if int(retry_after) > RETRY_AFTER_MAX:
            return None
        return jittered(float(retry_after), least=1.0, more=0.5)
    return _backoff(attempt)


class KubernetesGateway:
    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        qps: float = 50,
        burst: int = 100,
        timeout: float = 30,
        max_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.configuration = configuration
        # One connection per concurrent caller (web threads, the informer's watches) at most.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
        self.api_client = k8s_client.ApiClient(configuration)
        self.pool = self.api_client.rest_client.pool_manager
        self.sleep = sleep  # between retries; tests pass one that records instead of waiting
        self.limiter = TokenBucket(qps, burst, sleep=sleep)
        self.timeout = timeout
        self.max_attempts = max_attempts

    @classmethod
    def from_settings(cls) -> KubernetesGateway:
        configuration = k8s_client.Configuration()
        if settings.KUBE_IN_CLUSTER:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=settings.KUBECONFIG or None, context=settings.KUBE_CONTEXT or None,
                client_configuration=configuration,
            )
        return cls(configuration, qps=settings.KUBE_QPS, burst=settings.KUBE_BURST)

    @classmethod
    def from_kubeconfig(cls, path: str, **kwargs: Any) -> KubernetesGateway:
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        return cls(configuration, **kwargs)

    # --- HTTP -------------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "gpu-portal"}
        if content_type:
            headers["Content-Type"] = content_type
        token = (self.configuration.get_api_key_with_prefix("BearerToken")
                 or self.configuration.get_api_key_with_prefix("authorization"))
        if token:
            headers["Authorization"] = token
        return headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        ref: ObjectRef | None = None,
        ok_statuses: tuple[int, ...] = (),
        stream: bool = False,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        url = self.configuration.host + path + (f"?{urlencode(query)}" if query else "")
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in range(1, self.max_attempts + 1):
            self.limiter.take()
            try:
                response = self.pool.request(
                    method, url, body=payload, headers=self._headers(content_type), preload_content=not stream,
                    timeout=urllib3.Timeout(connect=5, read=timeout or self.timeout), retries=False,
                )
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if attempt == self.max_attempts:
                    raise KubeError(f"the API server did not answer ({error.__class__.__name__}: {error})", ref=ref) from error
                self.sleep(_backoff(attempt))
                continue
            status = response.status
            if status < 400 or status in ok_statuses:
                if stream:
                    return status, response
                return status, json.loads(response.data) if response.data else None
            data = response.data if not stream else response.read()
            if stream:
                response.release_conn()
            if status in RETRIABLE_STATUS and attempt < self.max_attempts:
                delay = _retry_delay(attempt, response.headers.get("Retry-After"))
                if delay is not None:
                    self.sleep(delay)
                    continue
            if _quota_bookkeeping_conflict(status, data, ref) and attempt < self.max_attempts:
                self.sleep(_backoff(attempt))
                continue
            message, reason = _status_message(status, data)
            raise KubeError(message, ref=ref, status=status, reason=reason)
        raise AssertionError("unreachable")

    # --- The gateway ----------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        ref = ref_of(obj)
        _, data = self._request(
            "PATCH", ref.info.object_path(ref.name, ref.namespace),
            query={"fieldManager": field_manager, "force": "true" if force else "false"},
            body=obj, content_type="application/apply-patch+yaml", ref=ref,
        )
        return data

    def dry_run(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        ref = ref_of(obj)
        _, data = self._request(
            "PATCH", ref.info.object_path(ref.name, ref.namespace),
            query={"fieldManager": field_manager, "force": "true", "dryRun": "All"},
            body=obj, content_type="application/apply-patch+yaml", ref=ref,
        )
        return data

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ref = ref_of(obj)
        _, data = self._request("POST", ref.info.collection_path(ref.namespace), body=obj,
                                content_type="application/json", ref=ref)
        return data

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        ref = ref_of(obj)
        _, data = self._request("PUT", ref.info.object_path(ref.name, ref.namespace), body=obj,
                                content_type="application/json", ref=ref)
        return data

    def delete(self, ref: ObjectRef) -> None:
        self._request(
            "DELETE", ref.info.object_path(ref.name, ref.namespace), query={"propagationPolicy": "Background"},
            ref=ref, ok_statuses=(404,),
        )

    def cluster_now(self) -> dt.datetime:
        # The portal's clock: nodes keep theirs in step (NTP); a pod's interval never ends before it
        # started all the same (jobs.sync).
        return dt.datetime.now(tz=dt.UTC)

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        status, data = self._request("GET", ref.info.object_path(ref.name, ref.namespace), ref=ref, ok_statuses=(404,))
        return None if status == 404 else data

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        info = kind_info(api_version, kind)
        query = {"labelSelector": label_selector(labels)} if labels else {}
        if fields:
            query["fieldSelector"] = label_selector(fields)  # the same key=value,key=value syntax
        items: list[dict[str, Any]] = []
        # Pages bound what each answer holds. The first is a consistent read, and since Kubernetes
        # 1.34 (ListFromCacheSnapshot) the API server serves it and the pages after it from its
        # watch cache, the later ones from a snapshot at the first page's resourceVersion: the same
        # consistent list as one answer, and no slower (measured at 1,000 teams, 10 kinds).
        while True:
            _, data = self._request("GET", info.collection_path(namespace), query={**query, "limit": LIST_PAGE})
            for item in data.get("items", []):
                # List items come without apiVersion and kind; put them back so refs work.
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                items.append(item)
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return items, (data.get("metadata") or {}).get("resourceVersion", "")
            query["continue"] = token

    def list_kinds(
        self, kinds: Sequence[tuple[str, str]], *, labels: dict[str, str] | None = None,
    ) -> KindLists:
        # At once, the API server encodes one kind while this process decodes another, where
        # each has a core to do it on; one after another, each waits for the other. On the
        # 2 shared cores of the scale benchmark (1,000 teams), both already saturated, the pass
        # measured the same either way (README, Benchmarks).
        with ThreadPoolExecutor(max_workers=max(1, min(len(kinds), LIST_THREADS)), thread_name_prefix="kube-list") as pool:
            futures = [pool.submit(self.list, api_version, kind, labels=labels) for api_version, kind in kinds]
        listed: dict[tuple[str, str], list[dict[str, Any]]] = {}
        failures: list[KubeError] = []
        for (api_version, kind), future in zip(kinds, futures, strict=True):
            try:
                listed[(api_version, kind)] = future.result()[0]
            except KubeError as error:
                failures.append(error)
        if failures:
            raise failures[0]
        return listed

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
        info = kind_info(api_version, kind)
        deadline = time.monotonic() + timeout_seconds
        if not resource_version:
            items, resource_version = self.list(api_version, kind, namespace=namespace, labels=labels)
            yield WatchEvent("RELISTED", {"items": items})
        while (remaining := int(deadline - time.monotonic())) > 0:
            query: dict[str, Any] = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                                     "timeoutSeconds": remaining}
            if labels:
                query["labelSelector"] = label_selector(labels)
            status, response = self._request("GET", info.collection_path(namespace), query=query, stream=True,
                                             ok_statuses=(410,), timeout=remaining + 5)
            expired = status == 410
            if not expired:
                try:
                    for event in _json_lines(response):
                        kind_of: str = event.get("type", "")
                        obj = event.get("object") or {}
                        if kind_of == "ERROR":
                            if obj.get("code") == 410:
                                expired = True
                                break
                            raise KubeError(f"watch of {kind} failed: {obj.get('message', obj)}", status=obj.get("code"))
                        resource_version = (obj.get("metadata") or {}).get("resourceVersion", resource_version)
                        if kind_of == "BOOKMARK":
                            continue
                        obj.setdefault("apiVersion", api_version)
                        obj.setdefault("kind", kind)
                        yield WatchEvent(kind_of, obj)
                except (urllib3.exceptions.HTTPError, OSError) as error:
                    raise KubeError(f"the watch of {kind} broke off ({error.__class__.__name__}: {error})") from error
                finally:
                    response.release_conn()
            if expired:
                # The server no longer has our version: start again from a fresh list.
                items, resource_version = self.list(api_version, kind, namespace=namespace, labels=labels)
                yield WatchEvent("RELISTED", {"items": items})

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int | None = 100, limit_bytes: int | None = None) -> str:
        ref = ObjectRef("v1", "Pod", name, namespace)
        query = {key: value for key, value in (("tailLines", tail_lines), ("limitBytes", limit_bytes)) if value is not None}
        status, response = self._request(
            "GET", ref.info.object_path(name, namespace) + "/log", query=query or None,
            ref=ref, stream=True, ok_statuses=(400, 404),
        )
        try:
            text = response.read().decode(errors="replace")
        finally:
            response.release_conn()
        if status == 404:
            return ""
        if status == 400:
            raise KubeError(_status_message(status, text.encode())[0], ref=ref, status=status)
        return text

    def read_subresource(
        self, ref: ObjectRef, subresource: str, *, query: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        # 404: no APIService for the group; 503: one is registered but its server does not answer
        # (Kueue's VisibilityOnDemand gate is off, or Kueue is down). Either way the cluster does
        # not serve the answer now, which the caller says in words.
        status, data = self._request(
            "GET", f"{ref.info.object_path(ref.name, ref.namespace)}/{subresource}", query=query, ref=ref,
            ok_statuses=(404, 503),
        )
        if status in (404, 503):
            return None
        return dict(data or {})

    def expect_nodes(self, nodes: Sequence[NodeSpec]) -> None:
        """Nothing to do: a real cluster has its own GPU nodes, registered by their kubelets."""

    def tick(self) -> None:
        """Nothing to do: a real cluster's controllers run by themselves."""


def _json_lines(response: Any) -> Iterator[dict[str, Any]]:
    buffer = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
