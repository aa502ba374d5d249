"""Reads done once per web request.

A launch asks some questions twice in one request: its checks, then its submission, which runs
in the same request when tasks are eager (the demo, the benchmark) and asks again because, in a
worker, it may run much later. `RequestMemoMiddleware` opens a memo around each request, and
`remembered` answers a repeated read from it. Outside a request (a worker's task, a management
command, a test calling a service) there is no memo and every read goes to the database.

Keys are tuples whose first item is a topic. Only reads that nothing later in the same request
changes belong here, and every service that writes what a topic reads calls `forget(topic)`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse

T = TypeVar("T")

_memo: ContextVar[dict[tuple[Hashable, ...], Any] | None] = ContextVar("portal_request_memo", default=None)


def remembered(key: tuple[Hashable, ...], read: Callable[[], T]) -> T:
    """`read()`, or what it returned earlier in this request."""
    memo = _memo.get()
    if memo is None:
        return read()
    if key not in memo:
        memo[key] = read()
    value: T = memo[key]
    return value


def remember(key: tuple[Hashable, ...], value: Any) -> None:
    """Keeps what a wider read already answered, for a later `remembered` of the same key."""
    memo = _memo.get()
    if memo is not None:
        memo[key] = value


def forget(topic: Hashable) -> None:
    """Drops every key of a topic: the service calling it changed what they read."""
    memo = _memo.get()
    if memo is not None:
        for key in [key for key in memo if key[0] == topic]:
            del memo[key]


class RequestMemoMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _memo.set({})
        try:
            return self.get_response(request)
        finally:
            _memo.reset(token)
