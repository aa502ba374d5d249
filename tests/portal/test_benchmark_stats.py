"""The benchmarks' one percentile rule (benchmarks/stats.py): nearest rank, always a measured value."""

from __future__ import annotations

import math

from benchmarks.stats import percentile


def test_p95_of_a_hundred_values_is_the_95th_smallest_whatever_their_order():
    assert percentile(list(range(100, 0, -1)), 0.95) == 95


def test_a_percentile_is_a_measured_value_at_the_edges():
    assert percentile([0.2, 0.1], 0.5) == 0.1
    assert percentile([0.3], 0.95) == 0.3
    assert percentile([1.0, 2.0, 3.0], 1.0) == 3.0
    assert percentile([1.0, 2.0, 3.0], 0.0) == 1.0


def test_nothing_measured_is_nan_not_zero():
    assert math.isnan(percentile([], 0.95))
