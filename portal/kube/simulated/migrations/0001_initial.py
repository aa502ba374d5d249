# Takes over the tables portal.0002 made (with their rows, on an existing database) and gives
# them this app's names. On a site with PORTAL_CLUSTER=kubernetes this app is not installed and
# portal's two empty tables stay as they were.

from django.db import migrations, models


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
                        'db_table': 'portal_simulatedevent',
                        'indexes': [models.Index(fields=['kind', 'id'], name='portal_simu_kind_4772a0_idx')],
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
                        'db_table': 'portal_simulatedobject',
                        'indexes': [models.Index(fields=['kind', 'namespace'], name='portal_simu_kind_c957e0_idx')],
                        'constraints': [models.UniqueConstraint(fields=('api_version', 'kind', 'namespace', 'name'), name='one_simulated_object')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name='simulatedevent', table=None),
        migrations.AlterModelTable(name='simulatedobject', table=None),
        migrations.RenameIndex(model_name='simulatedevent', new_name='simulated_event_kind_id', old_name='portal_simu_kind_4772a0_idx'),
        migrations.RenameIndex(model_name='simulatedobject', new_name='simulated_object_kind_ns', old_name='portal_simu_kind_c957e0_idx'),
    ]
