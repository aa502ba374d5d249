"""The one retry policy of cluster tasks: how long a retry waits."""

from __future__ import annotations

from portal.tasks import RETRY_DELAY_BASE, RETRY_DELAY_MAX, retry_delay


def test_retry_delays_double_and_are_drawn_from_the_upper_half_of_each_step():
    assert [retry_delay(n, rand=lambda: 0.0) for n in range(3)] == [RETRY_DELAY_BASE / 2, RETRY_DELAY_BASE, RETRY_DELAY_BASE * 2]
    assert [retry_delay(n, rand=lambda: 1.0) for n in range(3)] == [RETRY_DELAY_BASE, RETRY_DELAY_BASE * 2, RETRY_DELAY_BASE * 4]


def test_retry_delays_stop_growing_at_the_cap():
    assert retry_delay(30, rand=lambda: 1.0) == RETRY_DELAY_MAX
    assert retry_delay(30, rand=lambda: 0.0) == RETRY_DELAY_MAX / 2
