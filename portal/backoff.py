"""How long to wait before trying again: the one rule of the cluster gateway, the metrics door,
the task retry policy and leader election.

The wait doubles with each attempt up to a most, and each wait is stretched by a random factor,
so callers that failed together (every worker when the API server restarts, every candidate for
a Lease) do not come back together. The randomness is jitter, not security: `random` is fine.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# Past this many doublings every wait is long since at its most; it also keeps `2 ** attempt`
# a number a float can hold, whatever attempt a caller counts to.
MOST_DOUBLINGS = 62


def jittered(seconds: float, *, least: float, more: float, rand: Callable[[], float] = random.random) -> float:
    """`seconds` times a factor drawn from [least, least + more)."""
    return seconds * (least + more * rand())


def backoff_delay(attempt: int, *, base: float, most: float, least: float = 0.5, more: float = 1.0,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after `attempt` earlier retries (0 before the first): `base` doubled per
    attempt, at most `most`, then jittered by a factor from [least, least + more)."""
    doublings = min(max(attempt, 0), MOST_DOUBLINGS)
    return jittered(min(base * 2**doublings, most), least=least, more=more, rand=rand)
