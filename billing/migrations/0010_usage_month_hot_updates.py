"""Room in each page of the monthly level (UsageMonth), whose ~5,000 rows at 1,000 teams the
refresh that completes an hour adds to all at once: PostgreSQL then updates them in place (HOT:
unit_seconds is in no index) instead of writing both indexes again (that upsert read 82,000 buffers
instead of 114,000 in benchmarks/billing_rollups.py, 2026-11-26). Nothing to do on other databases."""

from django.db import migrations

TABLES = ("billing_usagemonth",)


def set_fillfactor(apps, schema_editor, value=70):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {int(value)})")


def reset_fillfactor(apps, schema_editor):
    set_fillfactor(apps, schema_editor, value=100)


class Migration(migrations.Migration):

    dependencies = [
        ("billing", "0009_usage_month_and_flavor_hour"),
    ]

    operations = [
        migrations.RunPython(set_fillfactor, reset_fillfactor),
    ]
