"""The one backoff rule: doubling to a most, jittered."""

from __future__ import annotations

import pytest

from portal.backoff import backoff_delay, jittered


def test_waits_double_from_the_base_and_stop_at_the_most():
    assert [backoff_delay(n, base=1.0, most=5.0, least=1.0, more=0.0) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_each_wait_is_stretched_by_a_factor_from_the_spread_asked():
    assert backoff_delay(2, base=1.0, most=60.0, rand=lambda: 0.0) == 2.0  # least 0.5 of 4
    assert backoff_delay(2, base=1.0, most=60.0, rand=lambda: 0.5) == 4.0
    assert jittered(10.0, least=1.0, more=0.2, rand=lambda: 0.5) == 11.0


def test_waits_really_vary_so_callers_failing_together_do_not_come_back_together():
    waits = {backoff_delay(3, base=0.1, most=5.0) for _ in range(50)}

    assert len(waits) > 1 and all(0.4 <= wait < 1.2 for wait in waits)


@pytest.mark.parametrize("attempt", [10**6, 10**18, 2**63])
def test_an_attempt_counted_far_past_the_most_waits_the_most_rather_than_overflowing(attempt):
    assert backoff_delay(attempt, base=0.1, most=5.0, least=1.0, more=0.0) == 5.0


def test_an_attempt_below_zero_waits_the_base_never_less():
    assert backoff_delay(-3, base=0.1, most=5.0, least=1.0, more=0.0) == 0.1
