"""Every team gets a uid, the proof written on its cluster objects.

A plain AddField with default=uuid.uuid4 would give every existing row the same value (the
default is computed once), so the column is added nullable, filled row by row, then made
unique and required. The existing teams' objects were created without a uid, so those teams
adopt their labelled objects until the next apply annotates them.
"""

import uuid

from django.db import migrations, models


def give_each_team_its_uid(apps, schema_editor):
    Team = apps.get_model("tenants", "Team")
    for team in Team.objects.only("pk"):
        Team.objects.filter(pk=team.pk).update(uid=uuid.uuid4(), adopts_unannotated=True)


class Migration(migrations.Migration):
    # Rows are updated between two ALTER TABLEs: outside one transaction, PostgreSQL never sees
    # pending trigger events on the table it alters.
    atomic = False

    dependencies = [
        ("tenants", "0002_cluster_sync_and_policy"),
    ]

    operations = [
        migrations.AddField(
            model_name="team",
            name="uid",
            field=models.UUIDField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="team",
            name="adopts_unannotated",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.RunPython(give_each_team_its_uid, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="team",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
        ),
    ]
