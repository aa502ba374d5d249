"""What the portal reads of Dynamic Resource Allocation objects, the same on every cluster."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

RESOURCE_API = "resource.k8s.io/v1"
_DRIVER = re.compile(r"""^\s*device\.driver\s*==\s*["']([^"']+)["']\s*$""")


def class_driver(device_class: Mapping[str, Any]) -> str | None:
    """The driver a DeviceClass selects its devices of, where a selector says only that
    (`device.driver == "gpu.nvidia.com"`, as DRA drivers' classes do); None where it says more or else."""
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        if match := _DRIVER.match(((selector.get("cel") or {}).get("expression")) or ""):
            return match[1]
    return None


def devices_by_node(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    """Node name -> (driver, pool, device) of every device the ResourceSlices publish for it."""
    devices: dict[str, list[tuple[str, str, str]]] = {}
    for body in slices:
        spec = body.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        devices.setdefault(spec.get("nodeName", ""), []).extend(
            (spec.get("driver", ""), pool, device["name"]) for device in spec.get("devices") or [])
    return devices
