"""The metrics door's contract: the real Prometheus (scraping the DCGM stand-in) and the
simulated door answer the portal's questions alike."""

from __future__ import annotations

import datetime as dt

import pytest

from portal.metrics import PodKey, PodSpan

FIVE_MINUTES = dt.timedelta(minutes=5)
HALF_HOUR = dt.timedelta(minutes=30)


def _near(value: float | None, expected: float, tolerance: float = 1.0) -> bool:
    return value is not None and abs(value - expected) <= tolerance


def test_a_busy_training_job_reads_busy_over_any_window(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-1-abcde", kind="training", gpus=2, engine_active=0.91)
    telemetry.scraped()
    for window in (FIVE_MINUTES, HALF_HOUR):  # the recorded 5-minute average and a raw window
        activity = telemetry.eventually(
            lambda w=window: telemetry.door.engine_active(namespaces=[ns], window=w),
            lambda a: _near(a.by_pod.get(PodKey(ns, "wl-1-abcde")), 91), what=f"91 % over {window}")
        assert set(activity.by_pod) == {PodKey(ns, "wl-1-abcde")}


def test_an_idle_notebook_reads_idle_and_other_namespaces_are_not_answered(telemetry):
    ns, elsewhere = telemetry.namespace(), telemetry.namespace()
    telemetry.run_pod(ns, "wl-2-0", kind="notebook", engine_active=0.004)
    telemetry.run_pod(elsewhere, "wl-3-0", kind="training", engine_active=0.9)
    telemetry.scraped()
    activity = telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[ns], window=HALF_HOUR),
                                    lambda a: PodKey(ns, "wl-2-0") in a.by_pod, what="the notebook reports")
    assert activity.by_pod[PodKey(ns, "wl-2-0")] < 1
    assert PodKey(elsewhere, "wl-3-0") not in activity.by_pod


def test_a_mig_slice_reads_its_engine_active_though_it_has_no_gpu_util(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-4-xyz", kind="inference", engine_active=0.42, mig_profile="1g.10gb")
    telemetry.scraped()
    telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[ns], window=FIVE_MINUTES),
                         lambda a: _near(a.by_pod.get(PodKey(ns, "wl-4-xyz")), 42), what="the MIG slice's 42 %")


def test_a_pod_without_telemetry_is_not_answered_rather_than_read_as_idle(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-5-a", engine_active=0.5)
    telemetry.scraped()
    activity = telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[ns], window=HALF_HOUR),
                                    lambda a: PodKey(ns, "wl-5-a") in a.by_pod, what="the reporting pod")
    assert PodKey(ns, "wl-5-b") not in activity.by_pod


def test_an_exporter_outage_leaves_no_answer_instead_of_the_old_samples(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-6-a", engine_active=0.01)
    telemetry.scraped()
    telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[ns], window=HALF_HOUR),
                         lambda a: PodKey(ns, "wl-6-a") in a.by_pod, what="the pod reports before the outage")
    telemetry.outage(True)
    telemetry.scraped()
    telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[ns], window=HALF_HOUR),
                         lambda a: not a.by_pod, what="no answer while the exporter is down")
    assert telemetry.door.xid_errors(namespaces=[ns], window=HALF_HOUR) == []


def test_a_workloads_charts_hold_engine_active_memory_power_and_temperature(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-7-a", engine_active=0.8, gpus=2)
    telemetry.scraped()
    telemetry.scraped()
    end = dt.datetime.now(dt.UTC)
    start = end - dt.timedelta(minutes=2)
    spans = [PodSpan("wl-7-a", started_at=end - dt.timedelta(minutes=10))]
    series = telemetry.eventually(
        lambda: telemetry.door.workload_series(namespace=ns, pods=spans, start=start, end=dt.datetime.now(dt.UTC)),
        lambda s: bool(s.engine_active) and _near(s.engine_active[-1].value, 80), what="the engine-active chart")
    assert series.step_seconds == 15
    assert series.memory_used_mib and series.memory_total_mib and series.power_watts and series.temperature_c
    assert 0 < series.memory_used_mib[-1].value < series.memory_total_mib[-1].value
    assert series.power_watts[-1].value > 0
    assert 20 < series.temperature_c[-1].value < 100
    assert all(start.timestamp() - 1 <= p.at for p in series.engine_active)
    empty = telemetry.door.workload_series(namespace=ns, pods=[PodSpan("wl-8-none", started_at=start)], start=start, end=end)
    assert not empty.has_data


def test_an_xid_on_a_pods_gpu_is_reported_with_its_code_and_no_other_gpu_is(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-9-a", engine_active=0.9)
    telemetry.run_pod(ns, "wl-9-b", engine_active=0.9)
    telemetry.scraped()
    telemetry.xid(ns, "wl-9-a", 79)
    telemetry.scraped()
    reports = telemetry.eventually(lambda: telemetry.door.xid_errors(namespaces=[ns], window=dt.timedelta(minutes=10)),
                                   lambda r: bool(r), what="the XID report")
    assert [(r.pod, r.code) for r in reports] == [("wl-9-a", 79)]
    assert reports[0].gpu


@pytest.mark.parametrize("days", [1, 30, 90])
def test_range_steps_keep_any_life_far_under_prometheus_points_limit(days):
    from portal.metrics import range_step

    end = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    step = range_step(end - dt.timedelta(days=days), end)
    assert days * 86400 / step <= 720 < 11_000


def test_every_gpu_reads_with_its_node_holder_engine_active_and_temperature(telemetry):
    ns = telemetry.namespace()
    telemetry.run_pod(ns, "wl-10-a", engine_active=0.7, gpus=2, node="gpu-node-7")
    telemetry.scraped()
    readings = telemetry.eventually(lambda: [r for r in telemetry.door.gpu_readings(window=FIVE_MINUTES) if r.namespace == ns],
                                    lambda found: len(found) == 2 and all(_near(r.engine_active, 70) for r in found),
                                    what="both GPUs at 70 %")
    assert {(r.node, r.pod) for r in readings} == {("gpu-node-7", "wl-10-a")}
    assert all(r.temperature_c and 20 < r.temperature_c < 100 for r in readings)
    assert len({r.gpu for r in readings}) == 2


def test_device_hours_count_only_reported_time_and_busy_is_engine_active_of_it(telemetry):
    """The team efficiency's question: what the GPUs did in the hours telemetry saw. Busy over
    covered is the engine active; a namespace that never reported has no entry (not 0 % busy)."""
    ns, silent = telemetry.namespace(), telemetry.namespace()
    telemetry.run_pod(ns, "wl-9-a", gpus=2, engine_active=0.5)
    telemetry.scraped()
    end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    start = end - dt.timedelta(minutes=20)
    hours = telemetry.eventually(lambda: telemetry.door.device_hours(namespaces=[ns, silent], start=start, end=end),
                                 lambda h: ns in h, what="the pod's reported device-hours")
    assert set(hours) == {ns}
    assert 0 < hours[ns].covered <= 2 * 20 / 60
    assert hours[ns].busy == pytest.approx(0.5 * hours[ns].covered, rel=0.02)


def test_a_shared_card_is_divided_among_the_pods_on_it_in_proportion_to_their_replicas(telemetry):
    """A time-sliced card shared four ways holds vision's pod (one replica) and nlp's (two): DCGM
    reports the card, 60 % busy, once per replica. Each pod reads the card's engine active (no
    per-process figures exist to tell them apart); its device-hours, busy hours and power are its
    share, a third and two thirds; its charts say two pods share the card."""
    vision, nlp = telemetry.namespace(), telemetry.namespace()
    telemetry.share_card("ts-node-1", [(vision, "wl-20-a", 1, 0.4), (nlp, "wl-21-a", 2, 0.2)])
    telemetry.scraped()
    for namespace, pod in ((vision, "wl-20-a"), (nlp, "wl-21-a")):
        telemetry.eventually(lambda n=namespace: telemetry.door.engine_active(namespaces=[n], window=FIVE_MINUTES),
                             lambda a, n=namespace, p=pod: _near(a.by_pod.get(PodKey(n, p)), 60),
                             what=f"{pod} reads the card's 60 %")
    end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    start = end - dt.timedelta(minutes=20)
    hours = telemetry.eventually(
        lambda: telemetry.door.device_hours(namespaces=[vision, nlp], start=start, end=end),
        lambda h: {vision, nlp} <= set(h) and h[nlp].covered == pytest.approx(2 * h[vision].covered, rel=0.1),
        what="nlp's device-hours twice vision's")
    for namespace in (vision, nlp):
        assert hours[namespace].busy == pytest.approx(0.6 * hours[namespace].covered, rel=0.02)
    assert hours[vision].covered + hours[nlp].covered <= 20 / 60  # one card: never more than its time

    def charts(namespace, pod, window):
        now = dt.datetime.now(dt.UTC)
        return telemetry.door.workload_series(namespace=namespace, pods=[PodSpan(pod, now - window)],
                                              start=now - window, end=now)

    # Half an hour charts from the GPUs' series (a point every 15 s); two days, a point every 5
    # minutes, from the per-pod recording rules.
    for window in (HALF_HOUR, dt.timedelta(days=2)):
        ours = telemetry.eventually(lambda w=window: charts(nlp, "wl-21-a", w), lambda s: bool(s.power_watts and s.sharers),
                                    what=f"nlp's charts over {window}")
        theirs = charts(vision, "wl-20-a", window)
        assert ours.sharers[-1].value == theirs.sharers[-1].value == 2
        assert ours.power_watts[-1].value == pytest.approx(2 * theirs.power_watts[-1].value, rel=0.02)
        assert ours.engine_active[-1].value == pytest.approx(theirs.engine_active[-1].value, abs=2)
        assert ours.memory_total_mib[-1].value == theirs.memory_total_mib[-1].value  # the card's, counted once


def test_energy_gives_each_pod_on_a_shared_card_its_part_of_the_cards_power(telemetry):
    """The card's draw is split among the replicas reporting it: nlp's pod, holding two of the three,
    drew twice the watt-hours of vision's in every hour; a namespace that ran nothing drew none."""
    vision, nlp, idle = telemetry.namespace(), telemetry.namespace(), telemetry.namespace()
    telemetry.share_card("ts-node-2", [(vision, "wl-30-a", 1, 0.5), (nlp, "wl-31-a", 2, 0.3)])
    telemetry.scraped()
    hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)

    def totals(found):
        summed: dict[str, float] = {}
        for key, watt_hours in found.items():
            summed[key.namespace] = summed.get(key.namespace, 0.0) + watt_hours
        return summed

    energy = telemetry.eventually(
        lambda: totals(telemetry.door.energy_hours(namespaces=[vision, nlp, idle], start=hour - dt.timedelta(hours=1),
                                                   end=hour + dt.timedelta(hours=1))),
        lambda e: {vision, nlp} <= set(e) and e[nlp] == pytest.approx(2 * e[vision], rel=0.1), what="nlp drew twice vision's")
    assert idle not in energy and energy[vision] > 0
