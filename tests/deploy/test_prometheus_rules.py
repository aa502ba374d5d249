"""deploy/prometheus/: the rules load (`promtool check rules`), every alert fires where it should
and nowhere else (`promtool test rules`, deploy/prometheus/tests/alerts_test.yaml), and every
name they read exists."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.deploy.metric_names import (
    DCGM_METRICS,
    PROMETHEUS_DIR,
    RULE_FILES,
    exported_names,
    metric_names,
    recorded_names,
    rules,
)


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


def test_every_name_the_rules_read_is_recorded_exported_by_dcgm_or_by_the_portal(client, db):
    known = recorded_names() | DCGM_METRICS | exported_names(client.get("/metrics").content.decode())
    read = {name for path in RULE_FILES for rule in rules(path) for name in metric_names(rule["expr"])}
    assert read - known == set()
    assert {"portal_team_reconcile_failing", "portal_workload_queue_wait_seconds_bucket",
            "portal_http_requests_total"} <= read


def test_the_name_reader_sees_through_functions_matchers_and_label_lists():
    assert metric_names('histogram_quantile(0.95, sum by (team, le) (rate(x_bucket{le!="+Inf", a=~"$b"}[5m])))'
                        ' / on(team) group_left y:z:sum offset 5m unless absent(w)') == {"x_bucket", "y:z:sum", "w"}
