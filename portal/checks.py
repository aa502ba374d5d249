"""Checks of a deployment's settings that Django's own do not know, run by `manage.py check
--deploy` (CI and the chart's test run it with `--fail-level WARNING`, so a warning fails them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning

INGRESS_WITHOUT_TLS = "portal.W001"


@register(Tags.security, deploy=True)
def workload_ingress_has_tls(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """Inference servers and notebooks reached through an Ingress without TLS send their traffic,
    the portal's one-time ticket and the access cookie that stands for the user in the clear."""
    if not settings.PORTAL_INGRESS_DOMAIN or settings.PORTAL_INGRESS_TLS_SECRET or settings.PORTAL_INGRESS_CLUSTER_ISSUER:
        return []
    return [CheckWarning(
        f"Workloads get an Ingress under {settings.PORTAL_INGRESS_DOMAIN} (PORTAL_INGRESS_DOMAIN) but no TLS: "
        "notebooks and inference servers would answer plain HTTP, and the ticket and access cookie that let "
        "people in would cross the network readable.",
        hint="Set PORTAL_INGRESS_TLS_SECRET to a Secret with a wildcard certificate for the domain, or "
             "PORTAL_INGRESS_CLUSTER_ISSUER to a cert-manager ClusterIssuer.",
        id=INGRESS_WITHOUT_TLS,
    )]
