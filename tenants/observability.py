"""What the portal knows about teams, exported on /metrics when Prometheus scrapes.

Reconciles run in the worker, so their outcome is read from what they record on the team (see
portal.observability.scrape_collector_register): how many teams there are, whether a team's last apply failed, whether a change
is still waiting to be applied, and the GPU units it is guaranteed per flavor. Labels are the
team and its namespace (which dcgm-exporter's series carry), and the flavor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from django.db.models import Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from tenants.models import QuotaGrant, Team

logger = logging.getLogger(__name__)


class TeamCollector:
    """Two queries per scrape, whatever the number of teams."""

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        count, failing, pending, guaranteed = self._families()
        try:
            teams = list(Team.objects.values_list("id", "slug", "sync_error", "applied_version", "config_version"))
            grants = (QuotaGrant.objects.active(timezone.now()).values("team_id", "flavor__slug")
                      .annotate(units=Sum("units")).order_by("team_id", "flavor__slug"))
            grant_rows = list(grants)
        except DatabaseError:
            logger.warning("team metrics not exported: the database did not answer", exc_info=True)
            return
        count.add_metric([], float(len(teams)))
        names: dict[int, tuple[str, str]] = {}
        for team_id, slug, error, applied, config in teams:
            labels = [slug, Team(slug=slug).namespace]
            names[team_id] = (labels[0], labels[1])
            failing.add_metric(labels, 1.0 if error else 0.0)
            pending.add_metric(labels, 1.0 if applied < config else 0.0)
        for row in grant_rows:
            if row["team_id"] in names:
                guaranteed.add_metric([*names[row["team_id"]], row["flavor__slug"]], float(row["units"] or 0))
        yield from (count, failing, pending, guaranteed)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("portal_teams", "Teams in the portal; always present while the database answers."),
            GaugeMetricFamily("portal_team_reconcile_failing",
                              "1 while the team's last reconcile failed (its page says why), else 0.",
                              labels=["team", "namespace"]),
            GaugeMetricFamily("portal_team_reconcile_pending",
                              "1 while a change to the team is recorded but not yet applied to the cluster, else 0.",
                              labels=["team", "namespace"]),
            GaugeMetricFamily("portal_quota_guaranteed_units",
                              "GPU units the team's active quota grants guarantee, by flavor.",
                              labels=["team", "namespace", "flavor"]),
        )
