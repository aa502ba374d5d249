"""Summaries for the OpenAPI operations: the one-line title Swagger UI and Redoc show for each.

Written here once per operation id, so the view code stays as it is; an operation added later
without one gets a summary made from its path and method, never none.
"""

from __future__ import annotations

import re
from typing import Any

SUMMARIES = {
    "audit_events_list": "List audit events", "audit_events_retrieve": "Get an audit event",
    "billing_budget_alerts_list": "List budget alerts", "billing_budget_alerts_retrieve": "Get a budget alert",
    "billing_budgets_list": "List team budgets", "billing_budgets_retrieve": "Get a team's budget",
    "billing_budgets_update": "Set a team's budget",
    "billing_idle_policies_list": "List idle policies", "billing_idle_policies_create": "Set a flavor's idle policy",
    "billing_rates_list": "List the rate card", "billing_rates_create": "Set a flavor's price",
    "billing_statements_list": "List monthly statements", "billing_statements_create": "Close a month into a statement",
    "billing_statements_retrieve": "Get a monthly statement",
    "billing_statements_adjustments_list": "List a statement's adjustments",
    "billing_statements_adjustments_create": "Add an adjustment to a closed statement",
    "billing_statements_lines_list": "List a statement's lines",
    "billing_usage_retrieve": "Read GPU-hours and cost",
    "flavors_list": "List GPU flavors", "flavors_create": "Create a GPU flavor", "flavors_retrieve": "Get a GPU flavor",
    "flavors_partial_update": "Change a GPU flavor",
    "grants_list": "List quota grants", "grants_retrieve": "Get a quota grant",
    "image_registries_list": "List allowed image registries", "image_registries_create": "Allow an image registry",
    "image_registries_retrieve": "Get an allowed image registry", "image_registries_destroy": "Remove an allowed image registry",
    "memberships_list": "List team memberships", "memberships_create": "Add a member to a team",
    "memberships_retrieve": "Get a membership", "memberships_partial_update": "Change a member's role",
    "memberships_destroy": "Remove a member from a team",
    "notifications_list": "List your notifications", "notifications_retrieve": "Get a notification",
    "notifications_read_create": "Mark a notification read", "notifications_read_all_create": "Mark all notifications read",
    "quota_requests_list": "List quota requests", "quota_requests_create": "Request quota for a team",
    "quota_requests_retrieve": "Get a quota request", "quota_requests_approve_create": "Approve a quota request",
    "quota_requests_cancel_create": "Withdraw a quota request", "quota_requests_reject_create": "Reject a quota request",
    "teams_list": "List teams", "teams_create": "Create a team", "teams_retrieve": "Get a team",
    "teams_partial_update": "Change a team", "teams_destroy": "Delete a team",
    "teams_cluster_retrieve": "Read a team's queue in the cluster",
    "templates_list": "List workload templates", "templates_create": "Create a workload template",
    "templates_retrieve": "Get a workload template", "templates_partial_update": "Publish a new template version",
    "tokens_list": "List your API tokens", "tokens_create": "Create an API token", "tokens_retrieve": "Get an API token",
    "tokens_revoke_create": "Revoke an API token",
    "workloads_list": "List workloads", "workloads_create": "Launch a workload", "workloads_retrieve": "Get a workload",
    "workloads_logs_retrieve": "Read a workload's log", "workloads_notebook_token_create": "Get a notebook's login token",
    "workloads_relaunch_create": "Launch a workload again", "workloads_scale_create": "Scale an inference server",
    "workloads_stop_create": "Stop a workload", "workloads_why_waiting_retrieve": "Why a workload waits",
}

_VERBS = {"get": "Get", "post": "Create", "put": "Replace", "patch": "Change", "delete": "Delete"}


def _made_up(path: str, method: str) -> str:
    """"POST /api/teams/{slug}/archive/" -> "Archive (teams)": plain, but never empty."""
    words = [part for part in path.strip("/").split("/") if part and part != "api" and not part.startswith("{")]
    if not words:
        return _VERBS.get(method, method.upper())
    resource = words[-1].replace("-", " ")
    if method == "get" and not path.rstrip("/").endswith("}"):
        return f"List {resource}" if len(words) == 1 or path.count("{") == 0 else f"Read {resource}"
    if len(words) > 1 and not path.rstrip("/").endswith("}"):
        return f"{resource.capitalize()} ({words[-2].replace('-', ' ')})"
    return f"{_VERBS.get(method, method.upper())} {re.sub(r's$', '', resource)}"


def add_summaries(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular post-processing hook: every operation gets a summary."""
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if isinstance(operation, dict) and not operation.get("summary"):
                operation["summary"] = SUMMARIES.get(operation.get("operationId", "")) or _made_up(path, method)
    return result
