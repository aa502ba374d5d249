"""Pausing the cyclic collector (portal.collector) around the periodic team pass."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from portal.collector import collector_paused, startup_objects_frozen
from tenants import reconcile


@pytest.fixture(autouse=True)
def _collector_restored():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def test_the_collector_does_not_run_inside_and_runs_again_after():
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_runs_again_after_an_error_inside():
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_nested_and_overlapping_pauses_end_when_the_last_one_does():
    gc.enable()
    inner_started, inner_may_end = threading.Event(), threading.Event()

    def other_thread() -> None:
        with collector_paused():
            inner_started.set()
            inner_may_end.wait(5)

    with collector_paused():
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner_started.wait(5)
        with collector_paused():
            assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread's pause is still on"
    inner_may_end.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_collector_turned_off_by_someone_else_stays_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_what_the_process_loaded_to_start_is_out_of_the_collectors_reach_and_what_comes_after_is_not():
    class Node:
        pass

    try:
        startup_objects_frozen()
        assert gc.get_freeze_count() > 0
        cycle = Node()
        cycle.itself = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None, "a cycle made after the start is still collected"
    finally:
        gc.unfreeze()  # the rest of the suite runs as before


@pytest.mark.django_db
def test_the_periodic_team_pass_runs_with_the_collector_paused(monkeypatch):
    seen: list[bool] = []

    def live_objects() -> dict:
        seen.append(gc.isenabled())
        return {}

    monkeypatch.setattr(reconcile, "live_objects", live_objects)
    gc.enable()
    reconcile.cluster_reconcile()
    assert seen == [False]
    assert gc.isenabled()
