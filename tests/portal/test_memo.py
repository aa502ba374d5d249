"""The request memo: a read done once per request, never across requests, never outside one."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from portal import memo


def counting_read() -> tuple[list[int], Callable[[], int]]:
    calls: list[int] = []

    def read() -> int:
        calls.append(1)
        return len(calls)

    return calls, read


def test_outside_a_request_every_read_goes_to_the_source():
    calls, read = counting_read()
    memo.remember(("topic",), 99)

    assert [memo.remembered(("topic",), read) for _ in range(3)] == [1, 2, 3]


def test_in_a_request_a_read_is_done_once_until_its_topic_is_forgotten():
    calls, read = counting_read()
    seen: list[int] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.extend(memo.remembered(("topic", 1), read) for _ in range(2))
        memo.forget("other")
        seen.append(memo.remembered(("topic", 1), read))
        memo.forget("topic")
        seen.append(memo.remembered(("topic", 1), read))
        memo.remember(("topic", 2), 42)
        seen.append(memo.remembered(("topic", 2), read))
        return HttpResponse()

    memo.RequestMemoMiddleware(view)(HttpRequest())

    assert seen == [1, 1, 1, 2, 42]


def test_each_request_starts_with_an_empty_memo():
    calls, read = counting_read()
    middleware = memo.RequestMemoMiddleware(lambda request: HttpResponse(str(memo.remembered(("topic",), read))))

    answers = [middleware(HttpRequest()).content for _ in range(2)]

    assert answers == [b"1", b"2"]
