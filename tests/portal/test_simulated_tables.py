"""The simulated cluster's tables exist only where its app is installed (PORTAL_CLUSTER=simulated),
and a database from before, where portal's 0002 made them everywhere, gets there too: a real
site's empty leftovers are dropped, a simulated site's tables are kept with their rows."""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
PORTAL_BEFORE = ("portal", "0006_sso_identity_confirmed_at")
OLD_TABLES = {"portal_simulatedevent", "portal_simulatedobject"}
TABLES = {"simulated_cluster_simulatedevent", "simulated_cluster_simulatedobject"}
DROPPING = importlib.import_module("portal.migrations.0007_simulated_tables_only_where_installed")


def tables() -> set[str]:
    return set(connection.introspection.table_names())


def migrated(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)


def made_as_portal_0002_made_them() -> None:
    """portal.0002's tables as it once created them, in every database, with its index names."""
    old = MigrationExecutor(connection).loader.project_state(("portal", "0002_simulated_cluster")).apps
    with connection.schema_editor() as editor:
        for name in ("SimulatedEvent", "SimulatedObject"):
            editor.create_model(old.get_model("portal", name))


def latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_simulated_clusters_tables_are_its_own_and_portal_makes_none():
    assert tables() >= TABLES
    assert not OLD_TABLES & tables()


def test_a_real_sites_database_loses_the_empty_tables_portal_once_made(monkeypatch):
    # As with PORTAL_CLUSTER=kubernetes: the simulated cluster's app, its migrations and tables are not there.
    migrated([("simulated_cluster", None)])
    migrated([PORTAL_BEFORE])
    made_as_portal_0002_made_them()
    assert tables() >= OLD_TABLES
    monkeypatch.setattr(DROPPING, "simulated_installed", lambda: False)
    try:
        migrated([("portal", "0007_simulated_tables_only_where_installed")])
        assert not (OLD_TABLES | TABLES) & tables()
    finally:
        latest()
    assert tables() >= TABLES


def test_a_simulated_sites_database_from_before_keeps_its_cluster_under_the_apps_names():
    migrated([("simulated_cluster", None)])
    migrated([PORTAL_BEFORE])
    assert not TABLES & tables()
    made_as_portal_0002_made_them()
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO portal_simulatedobject (api_version, kind, namespace, name, body, resource_version) "
                       "VALUES ('v1', 'Namespace', '', 'vision', '{}', 1)")
    latest()
    assert tables() >= TABLES and not OLD_TABLES & tables()
    from portal.kube.simulated.models import SimulatedObject

    assert list(SimulatedObject.objects.values_list("kind", "name")) == [("Namespace", "vision")]
    indexes = connection.introspection.get_constraints(connection.cursor(), "simulated_cluster_simulatedobject")
    assert "simulated_object_kind_ns" in indexes and "one_simulated_object" in indexes


@pytest.mark.django_db(transaction=False)
def test_a_real_site_migrated_from_nothing_has_no_simulated_cluster_tables(tmp_path):
    """A fresh database with PORTAL_CLUSTER=kubernetes, migrated as a site's deploy would: the
    simulated cluster's app is not installed, and nothing made its tables."""
    database = tmp_path / "site.sqlite3"
    environment = {**os.environ, "PORTAL_CLUSTER": "kubernetes", "DATABASE_URL": f"sqlite:///{database}"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=environment, check=True,
                   capture_output=True, timeout=300)
    with sqlite3.connect(database) as site:
        made = {name for (name,) in site.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "portal_user" in made
    assert not {name for name in made if "simulated" in name}
