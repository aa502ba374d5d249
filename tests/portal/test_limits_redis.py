"""The rate counters in the production cache: a real Redis (started by `make test`)."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from django.test import Client

from portal import limits
from tests.factories import UserFactory

pytestmark = pytest.mark.services


@pytest.fixture
def redis_cache(settings):
    if not os.environ.get("REDIS_URL"):
        pytest.fail("REDIS_URL is not set: run this through `make test`, which starts Redis")
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": os.environ["REDIS_URL"], "KEY_PREFIX": f"test-{uuid.uuid4()}"}}


def test_a_rate_counted_in_redis_refuses_the_attempt_past_it_and_says_how_long_to_wait(redis_cache, monkeypatch):
    monkeypatch.setattr(limits, "clock", lambda: 1_800_000_015.0)

    outcomes = [limits.hit(key="launch:1", count=2, seconds=60) for _ in range(3)]

    assert [o.allowed for o in outcomes] == [True, True, False]
    assert outcomes[-1].retry_after == 45


@pytest.fixture
def redis_down(settings):
    # Nothing listens on the port: every call is refused, as while Redis is down.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{port}/0"}}


def test_a_redis_that_does_not_answer_counts_nothing_and_refuses_nothing(redis_down, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(limits.log, "warning", lambda message, *args: said.append(message % args))

    outcomes = [limits.hit(key="launch:1", count=2, seconds=60) for _ in range(3)]

    assert [o.allowed for o in outcomes] == [True, True, True]
    assert len(said) == 3 and all("skipped: the cache did not answer" in line for line in said)


@pytest.mark.django_db
def test_signing_in_while_redis_is_down_works_and_a_wrong_password_is_told_so_not_a_server_error(redis_down, settings):
    """The sign-in throttle is a backstop: while its cache is away it steps aside (logged)."""
    settings.PORTAL_LOGIN_FAILURES_BEFORE_WAIT = 2
    UserFactory(username="ada", password="the-right-one")
    client = Client()
    for _ in range(3):  # past the limit: nothing was counted, so nothing locks
        wrong = client.post("/login/", {"username": "ada", "password": "wrong"})
        assert wrong.status_code == 200 and "Too many failed sign-ins" not in wrong.content.decode()
        assert "That username and password do not match" in wrong.content.decode()
    right = client.post("/login/", {"username": "ada", "password": "the-right-one"})
    assert right.status_code == 302 and client.session.get("_auth_user_id")
