"""A VS Code workspace: code-server in one pod of a StatefulSet, built as a notebook is (a token of
its own in a Secret, an optional home volume, reached through the portal's gate by its owner
only). code-server reads the token as its password (PASSWORD, with `--auth password`, its default);
the owner takes it from the workload's page as a notebook's. The idle sweep asks code-server's
/healthz when it was last used (jobs/idle.py)."""

from __future__ import annotations

from jobs.kinds.base import Kind, derive_server
from jobs.kinds.notebook import make_interactive
from portal.metrics.simulated import TelemetryProfile

KIND = Kind(
    name="workspace", label="VS Code workspace", noun="VS Code workspace", plural="VS Code workspaces",
    build=lambda spec: make_interactive(spec=spec, token_variable="PASSWORD", home="/home/coder"),
    owner=("apps/v1", "StatefulSet"), derive=derive_server,
    telemetry=TelemetryProfile("busy_then_idle", 0.25), serves_http=True, opened_by="owner", has_token=True,
    activity="code-server", local_port=8080, asks_storage=True, runs_on_cpu=True,
)
