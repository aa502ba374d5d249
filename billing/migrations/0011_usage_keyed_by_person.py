"""Hourly usage is keyed on the person (their user id) as well as the username they had: a new
account named like a deleted one no longer reads the deleted one's cost. Rows already metered get
the id of the one person their team's run intervals name by that username; where two people bore
the name (the case this fixes) the row keeps no id, and `manage.py billing_verify` names it.
"""

from collections import defaultdict

from django.db import migrations, models


SQLITE_INDEX = "billing_usagehour_key_sqlite"  # the key on SQLite (migration 0008): now with the person


def sqlite_key_with_person(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {SQLITE_INDEX}")
        schema_editor.execute(
            f"CREATE UNIQUE INDEX {SQLITE_INDEX} ON billing_usagehour (hour, account_id, flavor_id, IFNULL(owner_key, 0), "
            "owner_username, borrowed, IFNULL(rate_id, 0), fraction_numerator, fraction_denominator)")


def sqlite_key_without_person(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {SQLITE_INDEX}")
        schema_editor.execute(
            f"CREATE UNIQUE INDEX {SQLITE_INDEX} ON billing_usagehour (hour, account_id, flavor_id, owner_username, "
            "borrowed, IFNULL(rate_id, 0), fraction_numerator, fraction_denominator)")


def people_kept(apps, schema_editor):
    UsageHour = apps.get_model("billing", "UsageHour")
    Account = apps.get_model("billing", "Account")
    RunInterval = apps.get_model("jobs", "RunInterval")
    uids = dict(Account.objects.values_list("pk", "team_uid"))
    keys = defaultdict(set)
    for team_uid, username, owner_key in (RunInterval.objects.filter(owner_key__isnull=False)
                                          .values_list("team_uid", "owner_username", "owner_key").distinct()):
        keys[(team_uid, username)].add(owner_key)
    for account_id, username in UsageHour.objects.values_list("account_id", "owner_username").distinct():
        found = keys.get((uids.get(account_id), username), set())
        if len(found) == 1:
            UsageHour.objects.filter(account_id=account_id, owner_username=username).update(owner_key=found.pop())


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_usage_month_hot_updates'),
        ('tenants', '0009_team_four_eyes_by_default'),
        ('jobs', '0016_run_interval_owner_key'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='usagehour',
            options={'ordering': ['hour', 'account', 'flavor', 'owner_key', 'owner_username', 'borrowed']},
        ),
        migrations.RemoveConstraint(
            model_name='usagehour',
            name='one_usage_row_per_key',
        ),
        migrations.AddField(
            model_name='usagehour',
            name='owner_key',
            field=models.PositiveIntegerField(blank=True, help_text='Who launched the workloads: their user id, kept if the user goes.', null=True),
        ),
        migrations.AlterField(
            model_name='usagehour',
            name='owner_username',
            field=models.CharField(help_text='Their username then, for reading; kept if the user goes.', max_length=150),
        ),
        migrations.AddConstraint(
            model_name='usagehour',
            constraint=models.UniqueConstraint(fields=('hour', 'account', 'flavor', 'owner_key', 'owner_username', 'borrowed', 'rate', 'fraction_numerator', 'fraction_denominator'), name='one_usage_row_per_key', nulls_distinct=False),
        ),
        migrations.RunPython(people_kept, migrations.RunPython.noop),
        migrations.RunPython(sqlite_key_with_person, sqlite_key_without_person),
    ]
