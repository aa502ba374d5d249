from django.db import migrations, models
from django.db.models import F


def stamp_submitted_workloads(apps, schema_editor):
    # Workloads from before the sync kept this: the cluster accepted their objects when they
    # were submitted, which is as good a sighting as any, so a gone one can still be proven gone
    # and a failed one that still holds GPUs can still be stopped.
    Workload = apps.get_model("jobs", "Workload")
    Workload.objects.filter(submitted_at__isnull=False, seen_in_cluster_at__isnull=True).update(seen_in_cluster_at=F("submitted_at"))


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
        migrations.RunPython(stamp_submitted_workloads, migrations.RunPython.noop),
    ]
