from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='workload',
            name='seen_in_cluster_at',
            field=models.DateTimeField(blank=True, help_text='When the status sync first saw its Job, Deployment or StatefulSet in the cluster.', null=True),
        ),
    ]
