"""The one percentile rule every benchmark reports with."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest measured value with at least q of all values at
    or under it (p95 of 100 values is the 95th smallest), so a reported figure is always a value
    that was measured. NaN when nothing was."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]
