"""A column a migration adds must not break the release before it.

During a rolling update the previous release's pods still insert rows while the new schema is in
place; a new NOT NULL column without a database default makes every such insert fail (as the
previous release's code, like a migration test's historical models, does not name the column).
A new column is therefore nullable or has a ``db_default``. The columns that broke the rule before
it was written are listed here by name and stay so; the list only shrinks.
"""

from __future__ import annotations

from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField
from django.db.models import NOT_PROVIDED

OURS = {"portal", "tenants", "jobs", "billing"}

BEFORE_THE_RULE = {
    ("jobs", "0001_initial", "workload", "template_version"),
    ("jobs", "0004_workload_notebook_token_hashed", "workload", "notebook_token_sha256"),
    ("jobs", "0005_template_priorities_limits_and_image_registries", "workloadtemplateversion", "allowed_priorities"),
    ("jobs", "0006_run_interval_outlives_workload", "runinterval", "owner_username"),
    ("jobs", "0006_run_interval_outlives_workload", "runinterval", "borrowed"),
    ("jobs", "0006_run_interval_outlives_workload", "runinterval", "settled"),
    ("jobs", "0009_idle_policies", "workloadtemplateversion", "idle_action"),
    ("jobs", "0017_workload_queue_backend", "workload", "queue_backend"),
    ("portal", "0005_sso_identity_and_token_scope", "apitoken", "scope"),
    ("portal", "0006_sso_identity_confirmed_at", "ssoidentity", "confirmed_at"),
    ("tenants", "0001_initial", "membership", "team"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "applied_version"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "config_version"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "cpu_limit_cores"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "lends_idle"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "may_borrow"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "memory_limit_gib"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "pod_limit"),
    ("tenants", "0002_cluster_sync_and_policy", "team", "sync_error"),
    ("tenants", "0003_team_uid", "team", "adopts_unannotated"),
    ("tenants", "0004_team_requires_second_approver", "team", "requires_second_approver"),
    ("tenants", "0015_gpu_node_stack", "gpunode", "stack"),
}


def _columns_the_previous_release_cannot_insert() -> set[tuple[str, str, str, str]]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    found = set()
    for (app, name), migration in loader.disk_migrations.items():
        if app not in OURS:
            continue
        for operation in migration.operations:
            if not isinstance(operation, AddField):
                continue
            field = operation.field
            if not field.null and field.db_default is NOT_PROVIDED and not field.many_to_many:
                found.add((app, name, operation.model_name, operation.name))
    return found


def test_every_column_added_since_the_rule_is_nullable_or_has_a_database_default():
    assert _columns_the_previous_release_cannot_insert() - BEFORE_THE_RULE == set()


def test_the_scan_finds_every_column_the_list_names():
    """The scan sees the old columns (so it would see a new one), and the list holds none it no longer needs."""
    assert _columns_the_previous_release_cannot_insert() >= BEFORE_THE_RULE, (
        "a listed column now has a database default: take it off the list")
