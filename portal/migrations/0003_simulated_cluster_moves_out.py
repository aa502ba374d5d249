# The simulated cluster's tables now belong to the simulated_cluster app (portal/kube/simulated),
# which renames them; here they only leave portal's state, so no data is dropped.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0002_simulated_cluster'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='SimulatedEvent'),
                migrations.DeleteModel(name='SimulatedObject'),
            ],
            database_operations=[],
        ),
    ]
