"""The migration that lets run intervals outlive their workload fills the new fields of the
intervals already recorded, and gives every existing team its account."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("jobs", "0005_template_priorities_limits_and_image_registries"), ("billing", "0002_usage_rollups")]
AFTER = [("jobs", "0007_run_interval_billing_fields_required"), ("billing", "0003_meter_accounts_idle_policy_watermark")]


def test_existing_intervals_get_team_owner_flavor_and_fraction_and_teams_get_accounts():
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        user = old.get_model("portal", "User").objects.create(username="alice")
        team = old.get_model("tenants", "Team").objects.create(slug="vision", name="Vision", cost_center="CC-1")
        flavor = old.get_model("tenants", "Flavor").objects.create(
            name="A100 1g", slug="a100-1g", resource_name="nvidia.com/mig-1g.10gb", gpu_model="A100", fraction_denominator=7,
            capacity_units=7)
        template = old.get_model("jobs", "WorkloadTemplate").objects.create(slug="t", name="T", kind="training")
        version = old.get_model("jobs", "WorkloadTemplateVersion").objects.create(template=template, number=1, image="i")
        workload = old.get_model("jobs", "Workload").objects.create(
            team=team, owner=user, template_version=version, name="w", flavor=flavor, units=2, cpu=1, memory_gib=1,
            priority="normal", on_borrowed=True)
        old.get_model("jobs", "RunInterval").objects.create(
            workload=workload, pod_uid="p1", pod_name="w-0", resource_name=flavor.resource_name, units=2,
            started_at=dt.datetime(2026, 10, 1, tzinfo=dt.UTC))

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps

        interval = new.get_model("jobs", "RunInterval").objects.get()
        assert (interval.team_id, interval.team_uid, interval.owner_id, interval.owner_username) == (
            team.pk, team.uid, user.pk, "alice")
        assert (interval.flavor_id, interval.fraction_numerator, interval.fraction_denominator) == (flavor.pk, 1, 7)
        assert interval.borrowed is True and interval.metered_until is None and interval.settled is False
        account = new.get_model("billing", "Account").objects.get()
        assert (account.team_id, account.team_uid, account.slug, account.name, account.cost_center) == (
            team.pk, team.uid, "vision", "Vision", "CC-1")
    finally:  # the next test in this database finds it whole, even after a failure here
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
