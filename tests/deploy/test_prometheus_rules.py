"""deploy/prometheus/: the rules load (`promtool check rules`), every alert fires where it should
and nowhere else (`promtool test rules`, deploy/prometheus/tests/alerts_test.yaml), a shared GPU
is divided among its pods (sharing_test.yaml), and every name they read exists."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from portal.metrics.base import ENGINE_ACTIVE, PodSpan
from portal.metrics.prometheus import PrometheusMetrics
from tests.deploy.metric_names import (
    DCGM_METRICS,
    PROMETHEUS_DIR,
    RULE_FILES,
    exported_names,
    metric_names,
    recorded_names,
    rules,
)
from tests.telemetry.prometheus_server import shipped_rules


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: scripts/test.sh installs Debian's prometheus package, which ships it")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS_DIR)


def test_the_rule_files_pass_promtool_check():
    result = promtool("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_on_its_series_and_stays_quiet_on_the_others():
    result = promtool("test", "rules", "tests/alerts_test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_shared_cards_busy_time_is_divided_among_the_series_on_it():
    result = promtool("test", "rules", "tests/sharing_test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test():
    tested = set()
    for test in __import__("yaml").safe_load((PROMETHEUS_DIR / "tests" / "alerts_test.yaml").read_text())["tests"]:
        tested |= {case["alertname"] for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    alerts = {rule["alert"] for path in RULE_FILES for rule in rules(path) if "alert" in rule}
    assert alerts - tested == set()


def test_the_per_pod_averages_the_metrics_door_reads_are_recorded_as_agreed():
    recorded = {rule["record"]: rule["expr"].strip() for rule in rules(PROMETHEUS_DIR / "recording_rules.yaml")
                if "record" in rule}
    assert recorded["namespace_pod:dcgm_gr_engine_active:avg5m"] == (
        "avg by (namespace, pod) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[5m]))")
    assert recorded["namespace_pod:dcgm_gr_engine_active:avg1h"] == (
        "avg by (namespace, pod) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[1h]))")
    assert recorded["namespace_pod:dcgm_gpus:count1h"] == (
        "sum by (namespace, pod) (avg_over_time(namespace_pod_gpu:dcgm_device_share:ratio[1h]))")
    assert " ".join(recorded["namespace_pod_gpu:dcgm_device_share:ratio"].split()) == (
        '(DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""} >= bool 0) / on (Hostname, gpu, UUID, GPU_I_ID) group_left '
        'count by (Hostname, gpu, UUID, GPU_I_ID) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""})')
    assert recorded["namespace:dcgm_gpus:count1h"] == "sum by (namespace) (namespace_pod:dcgm_gpus:count1h)"


def test_the_suites_prometheus_evaluates_the_shipped_rules_and_nothing_else():
    """tests/telemetry's Prometheus loads deploy/prometheus's files, only sooner: a rule removed
    there is missing from the telemetry contract tests too."""
    loaded = shipped_rules()["groups"]
    shipped = [group for path in RULE_FILES for group in __import__("yaml").safe_load(path.read_text())["groups"]]
    def without_interval(group: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in group.items() if key != "interval"}

    assert list(map(without_interval, loaded)) == list(map(without_interval, shipped))
    assert {group["interval"] for group in loaded} == {"500ms"}


def test_every_name_the_rules_read_is_recorded_exported_by_dcgm_or_by_the_portal(client, db):
    known = recorded_names() | DCGM_METRICS | exported_names(client.get("/metrics").content.decode())
    read = {name for path in RULE_FILES for rule in rules(path) for name in metric_names(rule["expr"])}
    assert read - known == set()
    assert {"portal_team_reconcile_failing", "portal_workload_queue_wait_seconds_bucket",
            "portal_http_requests_total"} <= read


def test_the_name_reader_sees_through_functions_matchers_and_label_lists():
    assert metric_names('histogram_quantile(0.95, sum by (team, le) (rate(x_bucket{le!="+Inf", a=~"$b"}[5m])))'
                        ' / on(team) group_left y:z:sum offset 5m unless absent(w)') == {"x_bucket", "y:z:sum", "w"}


@pytest.mark.parametrize("recorded", [True, False], ids=["recording-rules", "raw-series"])
def test_the_doors_month_query_counts_each_hour_a_pod_reported_even_one_that_ended_inside_it(tmp_path, recorded):
    """The team efficiency's month query, as the door writes it, evaluated by Prometheus's own
    engine (promtool) over series known minute by minute: a pod with 2 GPUs half busy from 00:10
    to 01:40 covers 2 device-hours in each of two hours; a pod with 1 GPU 80 % busy from 02:05 to
    02:45 (ended before the hour did) covers its hour too, where reading the GPUs held at the
    hour's end would have found none."""
    asked: list[str] = []

    def ask(promql: str, *, at: dt.datetime | None = None) -> list[dict[str, Any]]:
        asked.append(promql)  # the query as the door writes it; promtool answers it below
        return []

    door = PrometheusMetrics("http://127.0.0.1:9", use_recording_rules=recorded)
    door.query = ask  # type: ignore[method-assign]
    end = dt.datetime(1970, 1, 1, 7, tzinfo=dt.UTC)
    door.device_hours(namespaces=["vision"], start=end - dt.timedelta(hours=7), end=end)
    case = {
        "rule_files": [str(PROMETHEUS_DIR / "recording_rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{ENGINE_ACTIVE}{{gpu="{gpu}",namespace="vision",pod="wl-1-0"}}', "values": "_x9 0.5x90"}
                for gpu in (0, 1)
            ] + [
                {"series": f'{ENGINE_ACTIVE}{{gpu="2",namespace="vision",pod="wl-2-0"}}', "values": "_x124 0.8x40"},
                {"series": f'{ENGINE_ACTIVE}{{gpu="3",namespace="nlp",pod="wl-3-0"}}', "values": "1x400"},
            ],
            "promql_expr_test": [{"expr": asked[0], "eval_time": "7h", "exp_samples": [
                {"labels": '{namespace="vision",stat="busy"}', "value": 2 * 0.5 * 2 + 0.8},
                {"labels": '{namespace="vision",stat="covered"}', "value": 2 * 2 + 1},
            ]}],
        }],
    }
    (tmp_path / "device_hours_test.yaml").write_text(__import__("yaml").safe_dump(case))
    result = promtool("test", "rules", str(tmp_path / "device_hours_test.yaml"))
    assert result.returncode == 0, asked[0] + "\n" + result.stdout + result.stderr


def _evaluated(tmp_path, query: str, series: list[tuple[str, str]], *, at: str,
               expected: list[tuple[str, float]]) -> None:
    """Prometheus's own engine (promtool) answers `query` (rounded to 4 places) over `series`
    known minute by minute, with the shipped recording rules loaded."""
    case = {
        "rule_files": [str(PROMETHEUS_DIR / "recording_rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": name, "values": values} for name, values in series],
            "promql_expr_test": [{"expr": f"round({query}, 0.0001)", "eval_time": at, "exp_samples": [
                {"labels": labels, "value": value} for labels, value in expected]}],
        }],
    }
    (tmp_path / "case.yaml").write_text(__import__("yaml").safe_dump(case))
    result = promtool("test", "rules", str(tmp_path / "case.yaml"))
    assert result.returncode == 0, query + "\n" + result.stdout + result.stderr


def _asked(call: Callable[[PrometheusMetrics], object], *, recorded: bool = True) -> str:
    asked: list[str] = []

    def ask(promql: str, **_: object) -> list[dict[str, Any]]:
        asked.append(promql)  # the query as the door writes it; promtool answers it
        return []

    door = PrometheusMetrics("http://127.0.0.1:9", use_recording_rules=recorded)
    door.query = ask  # type: ignore[method-assign]
    door.query_range = ask  # type: ignore[method-assign]
    call(door)
    return asked[0]


# Two teams share one time-sliced card (both pods see it 60 % busy); vision also has a card to
# itself (80 %), and nlp a second pod holding two replicas of a third card with an idle neighbour.
SHARED_CARDS = [
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="0",UUID="GPU-a",namespace="vision",pod="wl-1-0"}}', "0.6x420"),
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="0",UUID="GPU-a",namespace="nlp",pod="wl-3-0"}}', "0.6x420"),
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="1",UUID="GPU-b",namespace="vision",pod="wl-2-0"}}', "0.8x420"),
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="2",UUID="GPU-c",namespace="nlp",pod="wl-4-0",vgpu="0"}}', "0.3x420"),
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="2",UUID="GPU-c",namespace="nlp",pod="wl-4-0",vgpu="1"}}', "0.3x420"),
    (f'{ENGINE_ACTIVE}{{Hostname="n1",gpu="2",UUID="GPU-c",namespace="vision",pod="wl-5-0",vgpu="2"}}', "0.3x420"),
]


@pytest.mark.parametrize(("recorded", "hours"), [(True, 7), (False, 7), (True, 2)],
                         ids=["month-recorded", "month-raw", "hours"])
def test_the_doors_month_query_counts_a_shared_card_once_between_the_pods_on_it(tmp_path, recorded, hours):
    """vision holds half of GPU-a, all of GPU-b and a third of GPU-c for `hours`: 1.833 device-hours
    an hour, busy 0.6/2 + 0.8 + 0.3/3 of them; nlp the other half of GPU-a and two thirds of GPU-c.
    Counting each pod's series whole would make GPU-a two devices and GPU-c three."""
    end = dt.datetime(1970, 1, 1, 7, tzinfo=dt.UTC)
    query = _asked(lambda door: door.device_hours(namespaces=["vision", "nlp"], start=end - dt.timedelta(hours=hours),
                                                  end=end), recorded=recorded)
    _evaluated(tmp_path, query, SHARED_CARDS, at="7h", expected=[
        ('{namespace="vision",stat="covered"}', round(hours * (0.5 + 1 + 1 / 3), 4)),
        ('{namespace="vision",stat="busy"}', round(hours * (0.6 / 2 + 0.8 + 0.3 / 3), 4)),
        ('{namespace="nlp",stat="covered"}', round(hours * (0.5 + 2 / 3), 4)),
        ('{namespace="nlp",stat="busy"}', round(hours * (0.6 / 2 + 0.3 * 2 / 3), 4)),
    ])


CHART_SERIES = SHARED_CARDS + [(name.replace(ENGINE_ACTIVE, metric), values) for name, _ in SHARED_CARDS for metric, values in (
    ("DCGM_FI_DEV_POWER_USAGE", "90x420"), ("DCGM_FI_DEV_FB_USED", "6000x420"), ("DCGM_FI_DEV_FB_FREE", "10000x420"),
    ("DCGM_FI_DEV_GPU_TEMP", "55x420"))]
# A chart over 2 days has a point every 5 minutes and reads the per-pod recording rules (and the
# per-pod engine averages); over 7 hours, a point a minute, finer than those, so the GPUs' own
# series (and the recorded shares).
CHART_WINDOWS = pytest.mark.parametrize(("recorded", "hours"), [(True, 48), (False, 48), (True, 7)],
                                        ids=["per-pod-records", "raw-series", "short-window"])


@CHART_WINDOWS
def test_a_workloads_charts_on_a_shared_card_give_its_share_of_power_and_count_the_pods_on_it(tmp_path, recorded, hours):
    """wl-4-0 holds two of GPU-c's three replicas (vision's wl-5-0 the third): its power is two
    thirds of the card's 90 W, its memory the card's once (not once per replica), the card's
    engine active and temperature, and the card has 2 pods on it."""
    end = dt.datetime(1970, 1, 1, 7, tzinfo=dt.UTC)
    start = end - dt.timedelta(hours=hours)
    query = _asked(lambda door: door.workload_series(namespace="nlp", pods=[PodSpan("wl-4-0", start)], start=start, end=end),
                   recorded=recorded)
    assert ("namespace_pod:dcgm_fb_used_mib:sum" in query) == (recorded and hours == 48)
    _evaluated(tmp_path, query, CHART_SERIES, at="7h", expected=[
        ('{series="engine_active"}', 30), ('{series="memory_used"}', 6000), ('{series="memory_total"}', 16000),
        ('{series="power"}', 60), ('{series="temperature"}', 55), ('{series="sharers"}', 2),
    ])


@CHART_WINDOWS
def test_a_workloads_charts_take_each_pods_figures_then_its_pods(tmp_path, recorded, hours):
    """nlp's wl-3-0 (half of GPU-a, 60 % busy) and wl-4-0 (two thirds of GPU-c, 30 %) as one
    workload: engine active is the average of its pods', memory each pod's card, power each pod's
    part of its card's 90 W (45 + 60), the hottest card, and the most pods on one (2 on each)."""
    end = dt.datetime(1970, 1, 1, 7, tzinfo=dt.UTC)
    start = end - dt.timedelta(hours=hours)
    pods = [PodSpan("wl-3-0", start), PodSpan("wl-4-0", start)]
    query = _asked(lambda door: door.workload_series(namespace="nlp", pods=pods, start=start, end=end), recorded=recorded)
    _evaluated(tmp_path, query, CHART_SERIES, at="7h", expected=[
        ('{series="engine_active"}', 45), ('{series="memory_used"}', 12000), ('{series="memory_total"}', 32000),
        ('{series="power"}', 105), ('{series="temperature"}', 55), ('{series="sharers"}', 2),
    ])


@pytest.mark.parametrize("recorded", [True, False], ids=["per-pod-records", "raw-series"])
def test_a_month_chart_at_a_restart_shows_the_new_pod_not_the_one_it_replaced_too(tmp_path, recorded):
    """A month's chart has a point an hour. wl-9's first pod ran on GPU-x until 3:00 and its
    replacement on GPU-y from 3:05: at 3:30 the workload holds one GPU, not the ended pod's as well
    (a record read over the whole hour would add both)."""
    def on(gpu: str, pod: str, values: str) -> list[tuple[str, str]]:
        labels = f'{{Hostname="n1",gpu="{gpu[-1]}",UUID="{gpu}",namespace="nlp",pod="{pod}"}}'
        return [(f"{metric}{labels}", values.replace("V", value)) for metric, value in (
            (ENGINE_ACTIVE, "0.5"), ("DCGM_FI_DEV_FB_USED", "6000"), ("DCGM_FI_DEV_FB_FREE", "10000"),
            ("DCGM_FI_DEV_POWER_USAGE", "90"), ("DCGM_FI_DEV_GPU_TEMP", "55"))]

    series = on("GPU-x", "wl-9-a", "Vx180") + on("GPU-y", "wl-9-b", "_x184 Vx60")
    end = dt.datetime(1970, 1, 31, tzinfo=dt.UTC)
    start = end - dt.timedelta(days=30)
    query = _asked(lambda door: door.workload_series(namespace="nlp", pods=[PodSpan("wl-9-a", start), PodSpan("wl-9-b", start)],
                                                     start=start, end=end), recorded=recorded)
    _evaluated(tmp_path, query, series, at="3h30m", expected=[
        ('{series="engine_active"}', 50), ('{series="memory_used"}', 6000), ('{series="memory_total"}', 16000),
        ('{series="power"}', 90), ('{series="temperature"}', 55), ('{series="sharers"}', 1),
    ])


@pytest.mark.parametrize("recorded", [True, False], ids=["recording-rules", "raw-series"])
def test_the_doors_energy_query_gives_each_pod_its_part_of_its_cards_power_minute_by_minute(tmp_path, recorded):
    """The hour 01:00-02:00: GPU-a is time-sliced between vision and nlp at 100 W (50 W each, 50 Wh);
    GPU-b is a MIG card of 7 instances at 350 W, vision holding one (50 W: the other six are
    nobody's); nlp's wl-4-0 has GPU-c, 200 W, from 01:30 (31 of the hour's minutes: 103.33 Wh)."""
    power = "DCGM_FI_DEV_POWER_USAGE"
    series = [
        (f'{power}{{Hostname="n1",gpu="0",UUID="GPU-a",namespace="vision",pod="wl-1-0"}}', "100x180"),
        (f'{power}{{Hostname="n1",gpu="0",UUID="GPU-a",namespace="nlp",pod="wl-3-0"}}', "100x180"),
        (f'{power}{{Hostname="n1",gpu="1",UUID="GPU-b",GPU_I_ID="1",namespace="vision",pod="wl-2-0"}}', "350x180"),
        *[(f'{power}{{Hostname="n1",gpu="1",UUID="GPU-b",GPU_I_ID="{i}",namespace="",pod=""}}', "350x180")
          for i in range(2, 8)],
        (f'{power}{{Hostname="n1",gpu="2",UUID="GPU-c",namespace="nlp",pod="wl-4-0"}}', "_x90 200x89"),
    ]
    start = dt.datetime(1970, 1, 1, 1, tzinfo=dt.UTC)
    query = _asked(lambda door: door.energy_hours(namespaces=["vision", "nlp"], start=start,
                                                  end=start + dt.timedelta(hours=1)), recorded=recorded)
    _evaluated(tmp_path, query, series, at="2h", expected=[
        ('{namespace="vision"}', 100.0), ('{namespace="nlp"}', round(50 + 200 * 31 / 60, 4))])
