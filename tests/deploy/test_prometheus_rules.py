"""deploy/prometheus/: the rules load (`promtool check rules`), every alert fires where it should
and nowhere else (`promtool test rules`, deploy/prometheus/tests/alerts_test.yaml), and every
name they read exists."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from typing import Any

import pytest

from portal.metrics.base import ENGINE_ACTIVE
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
        "count by (namespace, pod) (avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[1h]))")
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
