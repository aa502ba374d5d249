"""The rate counters in the production cache: a real Redis (started by `make test`)."""

from __future__ import annotations

import os
import uuid

import pytest

from portal import limits

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
