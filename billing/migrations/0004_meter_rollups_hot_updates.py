"""Room in each page of the rollups that change every minute (the open hour's usage and
guarantee rows), so PostgreSQL updates them in place (HOT: unit_seconds is in no index) instead
of writing every index again. Nothing to do on other databases."""

from django.db import migrations

TABLES = ("billing_usagehour", "billing_guaranteehour")


def set_fillfactor(apps, schema_editor, value=70):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {int(value)})")


def reset_fillfactor(apps, schema_editor):
    set_fillfactor(apps, schema_editor, value=100)


class Migration(migrations.Migration):

    dependencies = [
        ("billing", "0003_meter_accounts_idle_policy_watermark"),
    ]

    operations = [
        migrations.RunPython(set_fillfactor, reset_fillfactor),
    ]
