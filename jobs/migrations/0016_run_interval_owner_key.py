"""Run intervals keep their owner's user id, which outlives the user: usage is keyed on the person,
not on a username a later account may take. Intervals whose owner still exists get it now."""

from django.db import migrations, models
from django.db.models import F


def owners_kept(apps, schema_editor):
    RunInterval = apps.get_model("jobs", "RunInterval")
    RunInterval.objects.filter(owner__isnull=False).update(owner_key=F("owner_id"))


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0015_workload_accepted_flavors'),
    ]

    operations = [
        migrations.AddField(
            model_name='runinterval',
            name='owner_key',
            field=models.PositiveIntegerField(blank=True, help_text="The owner's user id at the time.", null=True),
        ),
        migrations.RunPython(owners_kept, migrations.RunPython.noop),
    ]
