"""Counters of attempts in a time window, kept in Django's cache so that every web process (and
the pages and the API alike) counts against the same number.

A window is fixed, not sliding: `count` attempts per `seconds`, starting at a multiple of
`seconds`. It lets at most twice the rate through across a window's edge, which is fine for a
backstop against runaway scripts and keeps each check to one cache increment.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.core.cache import cache
from redis.exceptions import RedisError

from portal.errors import RateLimited

__all__ = ["Hit", "RateLimited", "clock", "guarded", "hit", "in_words", "per"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Tests replace this to move time forward without sleeping.
clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class Hit:
    allowed: bool
    retry_after: int  # whole seconds until the window that refused this attempt ends


def guarded(what: str, call: Callable[[], T], default: T) -> T:
    """`call()` on the cache, or `default` when the cache does not answer (Redis down), logged:
    the limits kept in the cache are backstops, and none may turn Redis's outage into the portal's."""
    try:
        return call()
    except (RedisError, OSError) as error:
        log.warning("%s skipped: the cache did not answer (%s)", what, error)
        return default


def increment(cache_key: str, *, timeout: int) -> int:
    """Adds one to a counter in the cache and returns it; the counter expires `timeout` seconds
    after its first count. A cache that does not answer (Redis down) counts nothing and returns 0:
    these limits are a backstop, and refusing every launch while Redis is away would turn its
    outage into the portal's."""

    def count() -> int:
        # add() is a no-op when the key exists, so concurrent first counts do not reset each other.
        cache.add(cache_key, 0, timeout=timeout)
        try:
            return int(cache.incr(cache_key))
        except ValueError:  # expired between add() and incr()
            cache.add(cache_key, 1, timeout=timeout)
            return 1

    return guarded(f"Counting rate limit {cache_key}", count, 0)


def hit(*, key: str, count: int, seconds: int) -> Hit:
    """Counts one attempt under `key` and says whether it is within `count` per `seconds`."""
    now = clock()
    window = int(now // seconds)
    attempts = increment(f"limit:{key}:{seconds}:{window}", timeout=seconds + 1)
    retry_after = max(math.ceil((window + 1) * seconds - now), 1)
    return Hit(allowed=attempts <= count, retry_after=retry_after)


def per(seconds: int) -> str:
    """A rate's window in words: "a minute", "an hour", "every 90 seconds"."""
    named = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}
    return named.get(seconds, f"every {seconds} seconds")


def in_words(seconds: int) -> str:
    """"45 seconds", "1 minute", "14 minutes": rounded up, so the wait is never understated."""
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
