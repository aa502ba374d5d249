"""What an interactive server says of its own use, asked over HTTP from the portal's pods (the
team's NetworkPolicy `gpu-portal-allow-portal` admits them, PORTAL_NAMESPACE and
PORTAL_POD_LABELS, to the HTTP port of the kinds that name the server they run, `Kind.activity`):
Jupyter answers /api/status with its last_activity (PORTAL_NOTEBOOK_STATUS_URL); code-server
answers /healthz with its lastHeartbeat, in milliseconds since the epoch
(PORTAL_WORKSPACE_STATUS_URL).

It is the idle sweep's second signal (jobs/reclaim.py), used only where it is reachable: a server
used more recently than its GPU went idle is kept; one the check cannot reach, or whose answer it
cannot read, is judged by its GPU alone."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.access import notebook_token
from jobs.models import Workload

log = logging.getLogger(__name__)

STATUS_TIMEOUT_SECONDS = 3


@dataclass(frozen=True)
class NotebookActivity:
    """What one notebook told the idle check. At most one of the three is set."""

    last_activity: dt.datetime | None = None  # when it was last used
    unreachable: str = ""  # why the portal could not reach it
    unreadable: str = ""  # it answered, but not with a time the check can trust


def notebook_activity(workload: Workload) -> NotebookActivity:
    """What the workload's server says of its own use, read as its kind's server answers."""
    if workload.kind_facts.activity == "code-server":
        url = settings.PORTAL_WORKSPACE_STATUS_URL.format(name=workload.k8s_name, namespace=workload.team.namespace)
        return _asked(url, _code_server)
    url = settings.PORTAL_NOTEBOOK_STATUS_URL.format(name=workload.k8s_name, namespace=workload.team.namespace)
    url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"token": notebook_token(workload)})
    return _asked(url, _jupyter)


def _asked(url: str, read: Callable[[dict[str, Any]], NotebookActivity]) -> NotebookActivity:
    try:
        with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT_SECONDS) as response:  # noqa: S310 - the site's own config
            body = response.read()
    except urllib.error.HTTPError as error:  # it answered, with an error
        return NotebookActivity(unreadable=f"it answered HTTP {error.code}")
    except urllib.error.URLError as error:
        return NotebookActivity(unreachable=str(error.reason))
    except http.client.HTTPException as error:
        return NotebookActivity(unreadable=f"it did not answer in HTTP ({type(error).__name__})")
    except (TimeoutError, OSError) as error:
        return NotebookActivity(unreachable=f"no answer within {STATUS_TIMEOUT_SECONDS} s"
                                if isinstance(error, TimeoutError) else str(error))
    try:
        status = json.loads(body)
    except ValueError:
        return NotebookActivity(unreadable="its status is not JSON")
    if not isinstance(status, dict):
        return NotebookActivity(unreadable=f"its status is a {type(status).__name__}, not an object")
    return read(status)


def _code_server(status: dict[str, Any]) -> NotebookActivity:
    """code-server's /healthz: {"status": "alive" | "expired", "lastHeartbeat": ms since the epoch,
    0 before anyone used it}."""
    beat = status.get("lastHeartbeat")
    if isinstance(beat, bool) or not isinstance(beat, int | float) or not 0 <= beat < 2**53:
        return NotebookActivity(unreadable=f"its lastHeartbeat {beat!r} is not a time in milliseconds")
    if beat == 0:
        return NotebookActivity(unreadable="nobody has used it since it started")
    return NotebookActivity(last_activity=dt.datetime.fromtimestamp(beat / 1000, tz=dt.UTC))


def _jupyter(status: dict[str, Any]) -> NotebookActivity:
    """Jupyter's /api/status: its last_activity, or now while someone is connected to a running kernel."""
    if status.get("kernels", 0) and status.get("connections", 0):
        return NotebookActivity(last_activity=timezone.now())  # someone is connected to a running kernel: not idle
    reported = status.get("last_activity")
    try:
        last = parse_datetime(reported) if isinstance(reported, str) else None
    except ValueError:  # shaped like a time, but no such day (month 13)
        last = None
    if last is None or timezone.is_naive(last):
        # A time without a zone cannot be compared with now; guessing one could stop a notebook in use.
        return NotebookActivity(unreadable=f"its last_activity {reported!r} is not a time with a zone")
    return NotebookActivity(last_activity=last)
