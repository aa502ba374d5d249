"""The metric names a PromQL expression reads, and the names that exist: recording rules, the
dcgm-exporter fields the portal's deployment collects, and what the portal's /metrics exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULE_FILES = [PROMETHEUS_DIR / "recording_rules.yaml", PROMETHEUS_DIR / "alerting_rules.yaml"]

# dcgm-exporter's fields (its default counters plus the profiling ones) that the rules and the
# dashboard read; each series carries gpu, UUID, modelName, Hostname, and pod, namespace, container
# for the pod holding the GPU, and GPU_I_PROFILE, GPU_I_ID on a MIG slice.
DCGM_METRICS = frozenset({
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS",
})

_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                       "unless", "inf", "nan"})
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
             "counter": ("_total", "_created"), "summary": ("_sum", "_count")}


def metric_names(expr: str) -> set[str]:
    """Every metric (or recorded series) name the expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings, variables inside them included
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\boffset\s+\d+[smhdwy]", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue  # a function or an operator
        names.add(name)
    return names


def rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for path in RULE_FILES for rule in rules(path) if "record" in rule}


def exported_names(metrics_text: str) -> set[str]:
    """The series names a /metrics answer holds, families without samples yet included."""
    names = set()
    for family in text_string_to_metric_families(metrics_text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names
