"""deploy/grafana/gpu-portal.json: it parses, it has the team, flavor and workload views, and
every panel and variable reads only names that exist (recording rules, dcgm-exporter's fields,
the portal's /metrics)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.deploy.metric_names import DCGM_METRICS, exported_names, metric_names, recorded_names

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpu-portal.json"


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def test_the_dashboard_has_rows_per_team_per_flavor_and_per_workload_with_unique_ids():
    dashboard = json.loads(DASHBOARD.read_text())
    assert {p["title"] for p in panels(dashboard) if p["type"] == "row"} == {"Teams", "Flavors", "Workload"}
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"team", "flavor", "workload"}


def test_every_query_reads_names_that_exist_and_variables_that_are_defined(client, db):
    dashboard = json.loads(DASHBOARD.read_text())
    known = recorded_names() | DCGM_METRICS | exported_names(client.get("/metrics").content.decode())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    exprs += [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["definition"])
              for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) > 15
    for expr in exprs:
        assert metric_names(expr), expr
        assert metric_names(expr) <= known, (expr, metric_names(expr) - known)
        assert set(re.findall(r"\$(\w+)", expr)) <= variables, expr
