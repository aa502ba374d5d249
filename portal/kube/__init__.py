"""The one gateway to a cluster. Nothing else in the code base talks to Kubernetes.

    from portal.kube import gateway
    gateway().apply(manifest)

`gateway()` returns the implementation settings choose: the simulated cluster (embedded
default) or a real one through the `kubernetes` client.
"""

from portal.kube.base import (
    FIELD_MANAGER,
    Gateway,
    KubeError,
    NodeSpec,
    ObjectRef,
    WatchEvent,
    kind_info,
    ref_of,
    taint_tolerated,
)
from portal.kube.select import gateway, reset_gateway

__all__ = [
    "FIELD_MANAGER",
    "Gateway",
    "KubeError",
    "NodeSpec",
    "ObjectRef",
    "WatchEvent",
    "gateway",
    "kind_info",
    "taint_tolerated",
    "ref_of",
    "reset_gateway",
]
