"""The Helm chart under test: helm itself (built once from the Go module proxy into the cache
beside the control plane), rendering with value sets, and the values every test starts from."""

from __future__ import annotations

import copy
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-portal"
BUILD_HELM = ROOT / "tests" / "cluster" / "build-helm.sh"

# The least a site must give: the image, its address and the three existing Secrets.
REQUIRED_VALUES: dict[str, Any] = {
    "image": {"repository": "registry.example.com/gpu-portal", "tag": "0.1.0"},
    "siteUrl": "https://gpu.example.com",
    "secretKey": {"existingSecret": "gpu-portal-secret-key"},
    "database": {"existingSecret": "gpu-portal-database"},
    "redis": {"existingSecret": "gpu-portal-redis"},
}


@cache
def helm() -> str:
    """The helm binary, built by tests/cluster/build-helm.sh if the cache lacks it (a few minutes, once)."""
    result = subprocess.run(["bash", str(BUILD_HELM)], capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"could not build helm:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


def operator_crds() -> Path:
    """The Prometheus operator's ServiceMonitor and PrometheusRule CRDs, fetched beside helm."""
    helm()
    result = subprocess.run(["bash", str(BUILD_HELM), "--crds"], capture_output=True, text=True, check=True)
    return Path(result.stdout.strip())


def gateway_api_crds() -> Path:
    """Gateway API's experimental CRDs (HTTPRoute, ReferenceGrant, Gateway, GatewayClass), fetched beside helm."""
    helm()
    result = subprocess.run(["bash", str(BUILD_HELM), "--gateway-crds"], capture_output=True, text=True, check=True)
    return Path(result.stdout.strip())


def merged(*overrides: dict[str, Any]) -> dict[str, Any]:
    """REQUIRED_VALUES with the overrides merged in, dict by dict."""
    def merge(into: dict[str, Any], other: dict[str, Any]) -> None:
        for key, value in other.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = copy.deepcopy(value)
    out = copy.deepcopy(REQUIRED_VALUES)
    for override in overrides:
        merge(out, override)
    return out


def run_helm(*args: str, values: dict[str, Any] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [helm(), *args]
    if values is not None:
        command += ["--values", "-"]
    result = subprocess.run(command, input=json.dumps(values) if values is not None else None,
                            capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(values: dict[str, Any], *, release: str = "portal", namespace: str = "gpu-portal",
           show_hooks: bool = True) -> list[dict[str, Any]]:
    """Every object `helm template` renders for these values (hooks included)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if not show_hooks:
        args.append("--no-hooks")
    out = run_helm(*args, values=values).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each Deployment's and Job's pod spec, by object name."""
    return {obj["metadata"]["name"]: obj["spec"]["template"]["spec"]
            for obj in objects if obj["kind"] in ("Deployment", "Job")}


def container_env(container: dict[str, Any], secrets: dict[tuple[str, str], str], pod_ip: str = "10.244.0.7") -> dict[str, str]:
    """A container's environment as the kubelet would give it: Secrets resolved from `secrets`
    ((name, key) -> value), the downward API's pod IP, and $(VAR) references expanded."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            value = item["value"]
            for name, known in env.items():
                value = value.replace(f"$({name})", known)
            env[item["name"]] = value
        elif "secretKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[item["name"]] = pod_ip
        else:
            env[item["name"]] = "portal-web-0"
    return env
