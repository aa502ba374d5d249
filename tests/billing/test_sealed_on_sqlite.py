"""The embedded default runs on SQLite, where adding a NOT NULL column rebuilds the table and drops
its triggers: a fresh SQLite database, migrated as `make demo` migrates it, still refuses any change
to a closed statement (the suite itself runs on PostgreSQL, so this migrates one on the side)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEALED = {
    "billing_adjustment_delete", "billing_adjustment_update", "billing_statement_sealed_delete",
    "billing_statement_sealed_update", "billing_statementenergy_sealed_delete", "billing_statementenergy_sealed_insert",
    "billing_statementenergy_sealed_update", "billing_statementline_sealed_delete", "billing_statementline_sealed_insert",
    "billing_statementline_sealed_update",
}


def test_a_freshly_migrated_sqlite_database_keeps_every_sealed_statement_trigger(tmp_path):
    env = {**os.environ, "DATABASE_URL": "", "PORTAL_VAR_DIR": str(tmp_path)}
    migrated = subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "billing"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr
    with sqlite3.connect(tmp_path / "portal.sqlite3") as db:
        triggers = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert triggers >= SEALED, f"missing: {sorted(SEALED - triggers)}"
        db.execute("INSERT INTO billing_statement (month, period_start, period_end, currency, time_zone, closed_at, "
                   "closed_by_name, charged_total, unallocated_total, sealed) "
                   "VALUES ('2026-10-01', '2026-10-01', '2026-11-01', 'USD', 'UTC', '2026-11-01', 'fiona', 0, 0, 1)")
        (statement,) = db.execute("SELECT id FROM billing_statement").fetchone()
        try:
            db.execute("DELETE FROM billing_statement WHERE id = ?", [statement])
        except sqlite3.IntegrityError as refused:
            assert "a closed statement never changes" in str(refused)
        else:
            raise AssertionError("SQLite let a closed statement be deleted")
