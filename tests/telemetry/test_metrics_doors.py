"""Each door on its own: the real one's errors in words and bounded retries, the simulated
one's plausible values per workload kind."""

from __future__ import annotations

import datetime as dt

import pytest

from portal.metrics import MetricsError, PodKey
from portal.metrics.prometheus import PrometheusMetrics
from portal.metrics.simulated import SimulatedMetrics, SimulatedPod
from tests.telemetry.prometheus_server import PrometheusServer, free_port


def test_an_unreachable_prometheus_is_retried_a_bounded_number_of_times_then_said_in_words():
    waits: list[float] = []
    door = PrometheusMetrics(f"http://127.0.0.1:{free_port()}", timeout=1, max_attempts=3, sleep=waits.append)
    with pytest.raises(MetricsError, match="could not be reached") as caught:
        door.engine_active(namespaces=["vision"], window=dt.timedelta(minutes=5))
    assert caught.value.retriable
    assert len(waits) == 2


def test_a_query_prometheus_refuses_is_not_retried(prometheus_server):
    waits: list[float] = []
    door = PrometheusMetrics(prometheus_server.url, sleep=waits.append)
    with pytest.raises(MetricsError, match=r"refused the query \(bad_data\)") as caught:
        door.query("sum(")
    assert not caught.value.retriable
    assert waits == []


@pytest.mark.parametrize("recorded", [True, False])
def test_a_query_over_prometheus_sample_limit_is_said_in_words_and_without_rules_says_what_helps(recorded):
    """Prometheus loads at most --query.max-samples in one query (50 million by default: a month of
    raw series at 500 GPUs is over it); here 100, and a subquery of 3,600."""
    server = PrometheusServer(scrape_targets=[], extra_flags=["--query.max-samples=100"])
    server.start()
    try:
        door = PrometheusMetrics(server.url, max_attempts=1, use_recording_rules=recorded)
        with pytest.raises(MetricsError, match=r"more samples than it allows in one query \(its --query.max-samples\)") as caught:
            door.query("count_over_time(vector(1)[1h:1s])")
    finally:
        server.stop()
    assert not caught.value.retriable
    assert ("recording rules" in str(caught.value)) == (not recorded)


def test_something_that_is_not_prometheus_is_said_so(prometheus_server):
    door = PrometheusMetrics(prometheus_server.url + "/nothing-here", max_attempts=1)
    with pytest.raises(MetricsError, match="did not answer with its API"):
        door.query("up")


def test_a_bearer_token_is_sent_when_configured():
    assert PrometheusMetrics("http://p:9090", token="s3cret").headers["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in PrometheusMetrics("http://p:9090").headers


def _door(*pods: SimulatedPod, now: float) -> SimulatedMetrics:
    return SimulatedMetrics(pods=lambda: list(pods), clock=lambda: now)


def test_simulated_training_is_busy_and_a_notebook_goes_idle_after_its_first_20_minutes():
    now = 1_800_000_000.0
    training = SimulatedPod("vision", "wl-1-a", "training", 2, now - 3600)
    fresh = SimulatedPod("vision", "wl-2-0", "notebook", 1, now - 600)
    old = SimulatedPod("vision", "wl-3-0", "notebook", 1, now - 7200)
    door = _door(training, fresh, old, now=now)
    by_pod = door.engine_active(namespaces=["vision"], window=dt.timedelta(minutes=10)).by_pod
    assert by_pod[PodKey("vision", "wl-1-a")] >= 80
    assert by_pod[PodKey("vision", "wl-2-0")] >= 40
    assert by_pod[PodKey("vision", "wl-3-0")] < 2
    assert door.engine_active(namespaces=["vision"], window=dt.timedelta(minutes=10)).by_pod == by_pod  # deterministic


def test_simulated_pods_just_started_or_finished_have_no_metrics_yet_their_past_is_charted():
    now = 1_800_000_000.0
    new = SimulatedPod("vision", "wl-4-a", "training", 1, now - 5)
    done = SimulatedPod("vision", "wl-5-a", "training", 1, now - 3600, running=False)
    door = _door(new, done, now=now)
    assert door.engine_active(namespaces=["vision"], window=dt.timedelta(minutes=5)).by_pod == {}
    from portal.metrics import PodSpan

    at = dt.datetime.fromtimestamp(now, dt.UTC)
    series = door.workload_series(namespace="vision", start=at - dt.timedelta(hours=1), end=at, pods=[
        PodSpan("wl-5-a", started_at=at - dt.timedelta(hours=1), ended_at=at - dt.timedelta(minutes=30))])
    assert series.engine_active and all(p.at <= now - 1800 for p in series.engine_active)


def test_simulated_busy_device_hours_weigh_each_gpu_by_how_busy_it_was():
    now = 1_800_000_000.0
    two_gpus = SimulatedPod("vision", "wl-6-a", "training", 2, now - 3 * 3600, running=False, ended_at=now - 3600)
    door = _door(two_gpus, SimulatedPod("speech", "wl-7-a", "training", 1, now - 3600), now=now)
    door.set_engine_active(namespace="vision", pod="wl-6-a", percent=50)
    at = dt.datetime.fromtimestamp(now, dt.UTC)
    hours = door.device_hours(namespaces=["vision"], start=at - dt.timedelta(days=1), end=at)
    assert set(hours) == {"vision"}
    assert hours["vision"].busy == pytest.approx(2 * 0.5 * 2, abs=0.02)  # 2 GPUs, half busy, for 2 hours
    assert hours["vision"].covered == pytest.approx(2 * 2, abs=0.02)


@pytest.mark.parametrize("hours", [2, 24 * 30])
def test_the_busy_hours_query_is_one_prometheus_accepts_for_a_short_span_and_a_month(prometheus_server, hours):
    door = PrometheusMetrics(prometheus_server.url)
    end = dt.datetime.now(dt.UTC)
    assert isinstance(door.device_hours(namespaces=["tm-none"], start=end - dt.timedelta(hours=hours), end=end), dict)
