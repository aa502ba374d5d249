"""Level-triggered reconcile of a team to the cluster."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def team_reconcile(*, team_id: int) -> None:
    log.info("team %s: nothing to reconcile until the cluster gateway exists", team_id)
