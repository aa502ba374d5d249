"""Run intervals keep what billing needs and survive their workload, team and owner.

Adds the fields as nullable, fills them from each interval's workload, and the next migration
makes the ones every interval has required."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def fill_from_workloads(apps, schema_editor):
    RunInterval = apps.get_model("jobs", "RunInterval")
    intervals = RunInterval.objects.select_related("workload__team", "workload__owner", "workload__flavor")
    batch = []
    for interval in intervals.iterator(chunk_size=2000):
        workload = interval.workload
        interval.team_id = workload.team_id
        interval.team_uid = workload.team.uid
        interval.owner_id = workload.owner_id
        interval.owner_username = workload.owner.username
        interval.flavor_id = workload.flavor_id
        interval.fraction_numerator = workload.flavor.fraction_numerator
        interval.fraction_denominator = workload.flavor.fraction_denominator
        interval.borrowed = workload.on_borrowed
        batch.append(interval)
        if len(batch) >= 2000:
            RunInterval.objects.bulk_update(batch, FIELDS)
            batch = []
    if batch:
        RunInterval.objects.bulk_update(batch, FIELDS)


FIELDS = ["team", "team_uid", "owner", "owner_username", "flavor", "fraction_numerator", "fraction_denominator",
          "borrowed"]


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0002_workload_seen_in_cluster_at"),
        ("tenants", "0004_team_requires_second_approver"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="runinterval",
            name="workload",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="intervals", to="jobs.workload"),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="team",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to="tenants.team"),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="team_uid",
            field=models.UUIDField(null=True, help_text="The team's uid: billing finds its account by it after the team is gone."),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="owner",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="owner_username",
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="flavor",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                    to="tenants.flavor"),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="fraction_numerator",
            field=models.PositiveSmallIntegerField(null=True),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="fraction_denominator",
            field=models.PositiveSmallIntegerField(null=True),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="borrowed",
            field=models.BooleanField(default=False, help_text="Began on quota borrowed from other teams."),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="metered_until",
            field=models.DateTimeField(blank=True, null=True, help_text="When the rollups first held it (up to here)."),
        ),
        migrations.AddField(
            model_name="runinterval",
            name="settled",
            field=models.BooleanField(default=False, help_text="Ended and metered to its end: metering skips it."),
        ),
        migrations.CreateModel(
            name="RunIntervalSwitch",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField()),
                ("borrowed", models.BooleanField(help_text="The state from this moment on.")),
                ("interval", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="switches",
                                               to="jobs.runinterval")),
            ],
            options={"ordering": ["interval", "at", "id"]},
        ),
        migrations.RunPython(fill_from_workloads, migrations.RunPython.noop),
    ]
