"""SQLite cannot make a unique constraint whose NULLs count as equal (Django skips
`one_usage_row_per_key` there, warning models.W047), and a rollup row without a rate has a NULL
`rate`. The embedded default runs on SQLite, so it gets the same key as an expression index that
reads a missing rate as 0; PostgreSQL keeps its NULLS NOT DISTINCT constraint."""

from django.db import migrations

INDEX = "billing_usagehour_key_sqlite"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            f"CREATE UNIQUE INDEX IF NOT EXISTS {INDEX} ON billing_usagehour (hour, account_id, flavor_id, owner_username, "
            "borrowed, IFNULL(rate_id, 0), fraction_numerator, fraction_denominator)")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ("billing", "0007_lent_hours"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
