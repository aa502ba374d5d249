# The simulated cluster's tables, made only where this app is installed (PORTAL_CLUSTER=simulated).
# A database from before, where portal.0002 made them under portal's names, keeps them and their
# rows: they are renamed to this app's (portal_simulatedobject -> simulated_cluster_simulatedobject,
# with their indexes). portal.0007 drops what portal.0002 left on a site without this app.

from django.db import migrations, models

OLD_TABLES = {"SimulatedEvent": ("portal_simulatedevent", "portal_simu_kind_4772a0_idx"),
              "SimulatedObject": ("portal_simulatedobject", "portal_simu_kind_c957e0_idx")}


def tables_made_or_adopted(apps, schema_editor):
    existing = set(schema_editor.connection.introspection.table_names())
    for name, (old_table, old_index) in OLD_TABLES.items():
        model = apps.get_model("simulated_cluster", name)
        if model._meta.db_table in existing:
            continue
        if old_table not in existing:
            schema_editor.create_model(model)
            continue
        schema_editor.alter_db_table(model, old_table, model._meta.db_table)
        (index,) = model._meta.indexes
        schema_editor.rename_index(model, models.Index(fields=index.fields, name=old_index), index)


def tables_dropped(apps, schema_editor):
    for name in OLD_TABLES:
        schema_editor.delete_model(apps.get_model("simulated_cluster", name))


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('portal', '0003_simulated_cluster_moves_out'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='SimulatedEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('api_version', models.CharField(max_length=100)),
                        ('kind', models.CharField(max_length=60)),
                        ('namespace', models.CharField(blank=True, max_length=63)),
                        ('type', models.CharField(max_length=10)),
                        ('body', models.JSONField()),
                    ],
                    options={
                        'indexes': [models.Index(fields=['kind', 'id'], name='simulated_event_kind_id')],
                    },
                ),
                migrations.CreateModel(
                    name='SimulatedObject',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('api_version', models.CharField(max_length=100)),
                        ('kind', models.CharField(max_length=60)),
                        ('namespace', models.CharField(blank=True, max_length=63)),
                        ('name', models.CharField(max_length=253)),
                        ('body', models.JSONField()),
                        ('resource_version', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'indexes': [models.Index(fields=['kind', 'namespace'], name='simulated_object_kind_ns')],
                        'constraints': [models.UniqueConstraint(fields=('api_version', 'kind', 'namespace', 'name'), name='one_simulated_object')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(tables_made_or_adopted, tables_dropped),
    ]
