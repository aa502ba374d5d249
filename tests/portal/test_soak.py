"""A minute of benchmarks/soak_demo.py: the demo's own processes, steady launches, a killed worker."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import soak_demo as soak

pytestmark = pytest.mark.soak


def test_a_minute_of_steady_launches_leaves_nothing_submitting_even_when_the_worker_is_killed(tmp_path):
    args = argparse.Namespace(minutes=1.0, max_launches=40, interval=2.0, port=0, var_dir=str(tmp_path / "var"),
                              kill_worker_after=20.0, keep=True, json=None)

    result = soak.soak(args)

    assert result["failures"] == [], result
    assert result["launches_accepted"] >= 25
    assert result["stuck_count"] == 0
    assert result["restarts"]["worker"] == 1  # the kill, and the supervisor brought it back
    assert result["readiness_not_ok_count"] == 0
