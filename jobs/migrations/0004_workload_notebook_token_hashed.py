"""Notebook tokens leave the database: each stored token is replaced by its SHA-256.

Notebooks running at the upgrade keep the token they were started with (in their pod's env) until
they stop; the portal can no longer hand it over, and says so with "relaunch it". New notebooks
get their token from a Kubernetes Secret (jobs/access.py).
"""

import hashlib

from django.db import migrations, models


def hash_tokens(apps, schema_editor):
    Workload = apps.get_model("jobs", "Workload")
    for workload in Workload.objects.exclude(notebook_token="").only("pk", "notebook_token").iterator():
        digest = hashlib.sha256(workload.notebook_token.encode()).hexdigest()
        Workload.objects.filter(pk=workload.pk).update(notebook_token_sha256=digest)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0003_template_slug_unique_per_team'),
    ]

    operations = [
        migrations.AddField(
            model_name='workload',
            name='notebook_token_sha256',
            field=models.CharField(blank=True, max_length=64),
        ),
        # One way: the tokens are gone after it, by design.
        migrations.RunPython(hash_tokens, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='workload',
            name='notebook_token',
        ),
    ]
