"""Dynamic Resource Allocation, as far as the portal relies on it: a pod naming a
ResourceClaimTemplate gets a ResourceClaim of its own (the resourceclaim controller's part), the
scheduler places it only on a node whose ResourceSlices have that many free devices of the claim's
DeviceClass and writes which ones it got in the claim's allocation, and a claim goes with its pod.
Kueue counts a workload's claimed devices under the name its deviceClassMappings give the class.

A DeviceClass selects its devices by driver (`device.driver == "..."`, the one CEL form the
simulated cluster reads); a class it cannot read selects nothing, so nothing claiming it starts."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from portal.kube.base import ObjectRef
from portal.kube.dra import RESOURCE_API, class_driver, devices_by_node
from portal.kube.simulated.models import SimulatedObject
from portal.kube.simulated.state import ClusterState

DRA_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "ResourceSlice", "DeviceClass")
LIVE_PHASES = ("Pending", "Running")


@functools.cache
def device_class_resources() -> dict[str, str]:
    """DeviceClass name -> the resource Kueue counts its devices as: the deviceClassMappings of
    the Kueue configuration the portal ships (deploy/kueue), which a real cluster runs with."""
    path = Path(settings.BASE_DIR) / "deploy" / "kueue" / "controller_manager_config.yaml"
    if not path.exists():
        return {}
    mappings = ((yaml.safe_load(path.read_text()) or {}).get("resources") or {}).get("deviceClassMappings") or []
    return {str(name): str(mapping["name"]) for mapping in mappings for name in mapping.get("deviceClassNames") or []}


@dataclass(frozen=True)
class Claim:
    """One of a pod's claims made from a template: its name in the pod, its DeviceClass and count."""

    name: str
    template: str
    device_class: str
    count: int


def template_claims(namespace: str, pod_spec: dict[str, Any], objects: dict[tuple[str, str], dict[str, Any]]) -> list[Claim]:
    """The claims a pod spec makes from ResourceClaimTemplates (`objects`: (namespace, name) -> template)."""
    claims = []
    for entry in pod_spec.get("resourceClaims") or []:
        template = objects.get((namespace, entry.get("resourceClaimTemplateName") or ""))
        if template is None:
            continue
        for request in (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            claims.append(Claim(name=entry["name"], template=entry["resourceClaimTemplateName"],
                                device_class=str(exactly.get("deviceClassName", "")), count=int(exactly.get("count", 1))))
    return claims


class Allocator:
    """The devices of each node's ResourceSlices, which live claims hold, and the claims of new pods."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        rows = state.store.snapshot(DRA_KINDS)
        self.templates = {(row.namespace, row.name): row.body for row in rows["ResourceClaimTemplate"]}
        self.claims = rows["ResourceClaim"]
        self.drivers = {row.name: class_driver(row.body) for row in rows["DeviceClass"]}
        self.devices = devices_by_node(row.body for row in rows["ResourceSlice"])
        self.held = self._held()

    def claims_of(self, namespace: str, pod_spec: dict[str, Any]) -> list[Claim]:
        return template_claims(namespace, pod_spec, self.templates)

    def _held(self) -> set[tuple[str, str, str]]:
        """The devices the claims of pods still pending or running hold."""
        live = {(pod.namespace, pod.name) for pod in self.state.pods
                if (pod.body.get("status") or {}).get("phase") in LIVE_PHASES}
        held = set()
        for row in self.claims:
            owner = _owner(row)
            if (row.namespace, owner) not in live:
                continue
            for result in ((row.body.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
                held.add((result["driver"], result["pool"], result["device"]))
        return held

    def pick(self, namespace: str, pod_spec: dict[str, Any], node: str) -> dict[str, list[tuple[str, str, str]]] | None:
        """The devices of `node` each claim of the pod would get, or None where they do not fit."""
        claims = self.claims_of(namespace, pod_spec)
        if not claims:
            return {}
        free = [device for device in self.devices.get(node, []) if device not in self.held]
        chosen: dict[str, list[tuple[str, str, str]]] = {}
        for claim in claims:
            driver = self.drivers.get(claim.device_class)
            matching = [device for device in free if driver is not None and device[0] == driver]
            if len(matching) < claim.count:
                return None
            chosen[claim.name] = matching[:claim.count]
            free = [device for device in free if device not in chosen[claim.name]]
        return chosen

    def allocate(self, pod: dict[str, Any], picked: dict[str, list[tuple[str, str, str]]]) -> list[dict[str, str]]:
        """Makes the pod's ResourceClaims with the devices picked; returns the pod's resourceClaimStatuses."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        statuses = []
        for claim in self.claims_of(namespace, pod["spec"]):
            suffix = hashlib.sha256(f"{name}-{claim.name}".encode()).hexdigest()[:5]
            claim_name = f"{name}-{claim.name}-{suffix}"[:253]
            template = self.templates[(namespace, claim.template)]
            body = {
                "apiVersion": RESOURCE_API, "kind": "ResourceClaim",
                "metadata": {"name": claim_name, "namespace": namespace,
                             "annotations": {"resource.kubernetes.io/pod-claim-name": claim.name},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                                  "uid": pod["metadata"].get("uid", "")}]},
                "spec": (template.get("spec") or {}).get("spec") or {},
                "status": {"allocation": {"devices": {"results": [
                    {"request": request_name(template), "driver": driver, "pool": pool, "device": device}
                    for driver, pool, device in picked[claim.name]]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"].get("uid", "")}]},
            }
            self.claims.append(self.state.create(ObjectRef(RESOURCE_API, "ResourceClaim", claim_name, namespace), body))
            self.held.update(picked[claim.name])
            statuses.append({"name": claim.name, "resourceClaimName": claim_name})
        return statuses

    def collect(self) -> None:
        """Deletes the claims whose pod is gone, as the garbage collector does."""
        pods = {(pod.namespace, pod.name) for pod in self.state.pods}
        keep: list[SimulatedObject] = []
        for row in self.claims:
            owner = _owner(row)
            if (row.namespace, owner) in pods:
                keep.append(row)
            else:
                self.state.remove(row)
        self.claims = keep


def _owner(claim: SimulatedObject) -> str:
    """The name of the pod a claim was made for."""
    owners: list[dict[str, Any]] = claim.body["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("name", ""))


def request_name(template: dict[str, Any]) -> str:
    requests = ((((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests")) or [{}]
    return str(requests[0].get("name", ""))
