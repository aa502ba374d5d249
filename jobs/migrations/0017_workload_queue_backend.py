"""Each workload records the queue backend it runs on. Every workload before this release was
launched on Kueue, the only backend there was, whatever PORTAL_QUEUE_BACKEND says while migrating;
new ones take the site's setting."""

from django.db import migrations, models

import jobs.models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0016_run_interval_owner_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='workload',
            name='queue_backend',
            field=models.CharField(default='kueue', editable=False, help_text='The queue backend it was launched on (kueue or volcano).', max_length=20),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name='workload',
            name='queue_backend',
            field=models.CharField(default=jobs.models.site_queue_backend, editable=False, help_text='The queue backend it was launched on (kueue or volcano).', max_length=20),
        ),
    ]
