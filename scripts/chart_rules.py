"""Writes deploy/helm/gpu-portal/files/prometheus-rules.yaml: deploy/prometheus's recording and
alerting rules in one file, which the chart's PrometheusRule carries (Helm reads only its own files)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HEADER = ("# GENERATED: deploy/prometheus/recording_rules.yaml and alerting_rules.yaml in one file, for the\n"
          "# chart's PrometheusRule (Helm reads only files inside the chart). tests/deploy/test_chart.py keeps\n"
          "# it equal to them; after changing those, rewrite it with `make chart-rules`.\n")

groups = [group for name in ("recording_rules.yaml", "alerting_rules.yaml")
          for group in yaml.safe_load((ROOT / "deploy" / "prometheus" / name).read_text())["groups"]]
target = ROOT / "deploy" / "helm" / "gpu-portal" / "files" / "prometheus-rules.yaml"
target.write_text(HEADER + yaml.safe_dump({"groups": groups}, sort_keys=False, width=120, allow_unicode=True))
print(f"wrote {target.relative_to(ROOT)}")
