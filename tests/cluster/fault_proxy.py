"""A fault-injecting proxy in front of the real API server, for the fault suite.

It listens on plain HTTP on loopback and forwards each request to the control plane's API server
over TLS with the admin's client certificate, so the portal's gateway talks to it as to any API
server. A `FaultPlan` decides, request by request, whether to answer in the server's place:

- `429`: Too Many Requests with `Retry-After: 1`, as API Priority and Fairness does;
- `500`, `503`: a Status the server would send when etcd or a webhook fails;
- `drop`: the connection closes before the request reaches the server;
- `lost`: the request reaches the server (and is applied), then the connection closes before
  the answer: the client cannot know it worked, the case that makes retries dangerous;
- `409`: a Conflict Status for a write (what a stale update or a racing create gets);
- `slow`: the answer comes after `slow_seconds`.

Watches are forwarded as streams and never faulted at random. A test can instead interrupt
one (`interrupt_watch`): the next watch of a path ends cleanly after its first event, as an API
server ends a watch early, and the client's resumed watch is held until `release_watch()`, so the
test can change the cluster and compact etcd in between: the resumed watch then meets a real 410.

Every request and what was done to it is recorded (`log`), so a test can count attempts.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAULTS = ("429", "500", "503", "drop", "lost", "409", "slow")
WRITES = ("POST", "PUT", "PATCH", "DELETE")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}


@dataclass
class Seen:
    method: str
    path: str  # with its query
    body_digest: str
    fault: str  # "" when forwarded untouched
    status: int | None  # what the client got (None: the connection was closed)
    expired: bool = False  # a watch the server ended with 410 Gone (as its status or an ERROR event)


@dataclass
class FaultPlan:
    """Faults at `rate` (0..1) drawn from `kinds` with a seeded generator; `only` narrows them to
    requests it accepts (method, path). `forced` faults come first, one per matching request."""

    rate: float = 0.0
    kinds: tuple[str, ...] = FAULTS
    seed: int = 1
    slow_seconds: float = 1.5
    only: Callable[[str, str], bool] = lambda method, path: True
    forced: list[tuple[Callable[[str, str], bool], str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.lock = threading.Lock()

    def force(self, fault: str, when: Callable[[str, str], bool]) -> None:
        """The next request `when` accepts gets `fault`, whatever the rate."""
        with self.lock:
            self.forced.append((when, fault))

    def choose(self, method: str, path: str) -> str:
        with self.lock:
            for index, (when, fault) in enumerate(self.forced):
                if when(method, path):
                    del self.forced[index]
                    return fault
            if _is_watch(path) or not self.only(method, path) or self.random.random() >= self.rate:
                return ""
            kinds = [k for k in self.kinds if k != "409" or method in WRITES]
            return self.random.choice(kinds) if kinds else ""


def _is_watch(path: str) -> bool:
    return parse_qs(urlsplit(path).query).get("watch", [""])[0] in ("1", "true")


def _status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


FAULT_ANSWERS = {
    "429": (429, "TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    "500": (500, "InternalError", "Internal error occurred: etcdserver: request timed out"),
    "503": (503, "ServiceUnavailable", "the server is currently unable to handle the request"),
    "409": (409, "Conflict", ("Operation cannot be fulfilled: the object has been modified; "
                              "please apply your changes to the latest version and try again")),
}


class FaultProxy:
    def __init__(self, upstream: str, *, ca_file: Path, cert_file: Path, key_file: Path, plan: FaultPlan | None = None) -> None:
        split = urlsplit(upstream)
        self.upstream_host, self.upstream_port = split.hostname or "127.0.0.1", split.port or 443
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.context.load_cert_chain(str(cert_file), str(key_file))
        self.plan = plan or FaultPlan()
        self.log: list[Seen] = []
        self.log_lock = threading.Lock()
        # interrupt_watch(): the path fragment, then whether its stream was ended, then the gate.
        self.interrupt: str = ""
        self.interrupted = threading.Event()
        self.resume_held = threading.Event()
        self.resume_gate = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="fault-proxy")
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def interrupt_watch(self, fragment: str) -> None:
        """The next watch whose path holds `fragment` ends cleanly after its first event; the
        client's next watch of it is held until `release_watch()`."""
        self.interrupted.clear()
        self.resume_held.clear()
        self.resume_gate.clear()
        self.interrupt = fragment

    def release_watch(self) -> None:
        self.resume_gate.set()

    # --- What the tests read ------------------------------------------------------------------

    def faults(self) -> Counter[str]:
        with self.log_lock:
            return Counter(seen.fault for seen in self.log if seen.fault)

    def longest_retry_run(self) -> int:
        """The most times in a row one identical request (method, path and body) was sent while
        each attempt failed: the gateway's retry budget, as the server saw it."""
        longest, run, previous = 0, 0, None
        with self.log_lock:
            seen_all = list(self.log)
        for seen in seen_all:
            key = (seen.method, seen.path, seen.body_digest)
            failed = seen.status is None or seen.status == 429 or seen.status >= 500
            run = run + 1 if key == previous else 1
            longest = max(longest, run)
            previous = key if failed else None
        return longest

    def requests(self, methods: Iterable[str] = WRITES) -> list[Seen]:
        with self.log_lock:
            return [seen for seen in self.log if seen.method in set(methods)]

    # --- Serving -------------------------------------------------------------------------------

    def _record(self, handler: BaseHTTPRequestHandler, body: bytes, fault: str, status: int | None,
                expired: bool = False) -> None:
        with self.log_lock:
            self.log.append(Seen(handler.command, handler.path, hashlib.sha256(body).hexdigest()[:16], fault, status,
                                 expired))

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        if self.interrupt and _is_watch(handler.path) and self.interrupt in handler.path and self.interrupted.is_set():
            self.interrupt = ""  # the client resuming the watch that was ended: held until released
            self.resume_held.set()
            self.resume_gate.wait(timeout=120)
        fault = self.plan.choose(handler.command, handler.path)
        if fault == "drop":
            self._record(handler, body, fault, None)
            handler.close_connection = True
            return
        if fault in FAULT_ANSWERS:
            code, reason, message = FAULT_ANSWERS[fault]
            data = _status_body(code, reason, message)
            handler.send_response(code)
            if code == 429:
                handler.send_header("Retry-After", "1")
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            self._record(handler, body, fault, code)
            return
        if fault == "slow":
            time.sleep(self.plan.slow_seconds)
        upstream = http.client.HTTPSConnection(self.upstream_host, self.upstream_port, context=self.context, timeout=120)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
            upstream.request(handler.command, handler.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            if fault == "lost":
                response.read()
                self._record(handler, body, fault, None)
                handler.close_connection = True
                return
            expired = self._relay(handler, response)
            self._record(handler, body, fault, response.status, expired)
        except OSError:
            self._record(handler, body, fault or "upstream-error", None)
            handler.close_connection = True
        finally:
            upstream.close()

    def _relay(self, handler: BaseHTTPRequestHandler, response: http.client.HTTPResponse) -> bool:
        """Relays the answer; returns whether it was a watch's 410 Gone."""
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in HOP_HEADERS and name.lower() != "content-length":
                handler.send_header(name, value)
        length = response.getheader("Content-Length")
        if length is not None:
            data = response.read()
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return response.status == 410
        # A stream (a watch, a followed log): relay it line by line (a watch event is one line).
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        expired = False
        while True:
            line = response.readline()
            if not line:
                break
            handler.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            handler.wfile.flush()
            event = _event_of(line)
            if event.get("type") == "ERROR" and (event.get("object") or {}).get("code") == 410:
                expired = True
            if (event.get("type") in ("ADDED", "MODIFIED", "DELETED") and self.interrupt
                    and self.interrupt in handler.path and not self.interrupted.is_set()):
                self.interrupted.set()  # armed while this watch was open: it counts too
                break  # ends the stream cleanly, as an API server ends a watch early
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
        return expired or response.status == 410


def _event_of(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}
