import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0003_run_interval_outlives_workload"),
    ]

    operations = [
        migrations.AlterField(
            model_name="runinterval",
            name="team_uid",
            field=models.UUIDField(help_text="The team's uid: billing finds its account by it after the team is gone."),
        ),
        migrations.AlterField(
            model_name="runinterval",
            name="flavor",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenants.flavor"),
        ),
        migrations.AlterField(
            model_name="runinterval",
            name="fraction_numerator",
            field=models.PositiveSmallIntegerField(),
        ),
        migrations.AlterField(
            model_name="runinterval",
            name="fraction_denominator",
            field=models.PositiveSmallIntegerField(),
        ),
        migrations.AddIndex(
            model_name="runinterval",
            index=models.Index(fields=["started_at"], name="run_interval_started"),
        ),
        migrations.AddIndex(
            model_name="runinterval",
            index=models.Index(fields=["ended_at"], name="run_interval_ended"),
        ),
        migrations.AddIndex(
            model_name="runinterval",
            index=models.Index(condition=models.Q(("settled", False)), fields=["id"], name="run_interval_unsettled"),
        ),
    ]
