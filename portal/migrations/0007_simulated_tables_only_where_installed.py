# portal.0002 once made the simulated cluster's tables in every database. Where the simulated
# cluster is installed (PORTAL_CLUSTER=simulated) its own 0001 adopts them, rows and all, whether
# it runs before or after this; anywhere else they were never used and are dropped, empty.

from django.apps import apps as installed_apps
from django.db import migrations

LEFT_BY_0002 = ("portal_simulatedevent", "portal_simulatedobject")


def simulated_installed():
    # The site's configuration, not the migration state: whether this process has the app.
    return installed_apps.is_installed("portal.kube.simulated")


def leftovers_dropped(apps, schema_editor):
    if simulated_installed():
        return
    existing = set(schema_editor.connection.introspection.table_names())
    for table in LEFT_BY_0002:
        if table in existing:
            schema_editor.execute(f"DROP TABLE {schema_editor.quote_name(table)}")


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0006_sso_identity_confirmed_at'),
    ]

    operations = [
        migrations.RunPython(leftovers_dropped, migrations.RunPython.noop),
    ]
