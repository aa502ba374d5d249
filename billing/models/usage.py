"""Metered usage, kept as hourly rollups like Slurm's usage tables.

Everything is counted in *unit-seconds* (units of a flavor × seconds), an integer, together with
the flavor's fraction of a physical GPU at the time it was metered. GPU-seconds are
unit_seconds × numerator / denominator, so sums are exact (a 1g MIG slice is 1/7 of a GPU, which
no decimal holds exactly) and a from-scratch recomputation equals the rollups to the unit.

An hour is an hour of the billing time zone (`BILLING_TIME_ZONE`): `hour` is the instant its
local clock shows hh:00, so local days and months are unions of whole rows, 23 or 25 of them on
the days the clocks change.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.models.rates import Rate
from tenants.models import Department, Flavor, Team


class Account(models.Model):
    """A team as billing knows it: made with the team and kept after the team is deleted, so
    metered hours and statements outlive what produced them. Name and cost center follow the
    team while it exists and keep their last values afterwards."""

    team = models.OneToOneField(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="billing_account")
    team_uid = models.UUIDField(null=True, blank=True, unique=True,
                                help_text="The team's uid, which run intervals keep: how metering finds the account.")
    slug = models.CharField(max_length=63)
    name = models.CharField(max_length=120)
    cost_center = models.CharField(max_length=60, blank=True)
    # The name of the team's department ("" for none): statements group by it, as they were at close.
    department = models.CharField(max_length=120, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)
    team_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["slug", "id"]

    def __str__(self) -> str:
        return self.slug if self.team_deleted_at is None else f"{self.slug} (deleted)"

    @classmethod
    def for_team(cls, team: Team) -> Account:
        """The team's account, made on first use; its name, cost center and department follow the team."""
        account = cls.objects.filter(models.Q(team_uid=team.uid) | models.Q(team=team)).order_by("pk").first()
        department = team.department.name if team.department is not None else ""
        if account is None:
            account, _ = cls.objects.get_or_create(team_uid=team.uid, defaults={
                "team": team, "slug": team.slug, "name": team.name, "cost_center": team.cost_center,
                "department": department})
            return account
        wanted: dict[str, object] = {"slug": team.slug, "name": team.name, "cost_center": team.cost_center,
                                     "department": department,
                                     "team_uid": team.uid}
        if team.pk is not None and account.team_id != team.pk:
            wanted["team"] = team
        changed = [field for field, value in wanted.items() if getattr(account, field) != value]
        if changed:
            for field in changed:
                setattr(account, field, wanted[field])
            account.save(update_fields=changed)
        return account

    @classmethod
    def follow_departments(cls) -> None:
        """Every existing team's account takes its department's name as it is now (a department
        renamed since a team was last saved); a deleted team's account keeps its last."""
        name = Department.objects.filter(teams=models.OuterRef("team_id")).values("name")[:1]
        cls.objects.filter(team__isnull=False).update(
            department=Coalesce(models.Subquery(name), models.Value(""), output_field=models.CharField()))


class UsageHour(models.Model):
    """What one team's person used of one flavor in one hour, guaranteed or borrowed, at one rate.

    A row's key is everything a statement line or a page groups by, so no page or statement ever
    reads raw run intervals for a month. An hour in which the price changed has a row per rate.
    """

    hour = models.DateTimeField(help_text="The instant the billing time zone's clock shows hh:00.")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="usage_hours")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    owner_key = models.PositiveIntegerField(
        null=True, blank=True, help_text="Who launched the workloads: their user id, kept if the user goes.")
    owner_username = models.CharField(max_length=150, help_text="Their username then, for reading; kept if the user goes.")
    borrowed = models.BooleanField(default=False, help_text="Run on another team's idle quota.")
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                             help_text="The rate in force; empty while the flavor had no price.")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    unit_seconds = models.BigIntegerField(help_text="Units × seconds; GPU-seconds are this × the fraction.")

    class Meta:
        ordering = ["hour", "account", "flavor", "owner_key", "owner_username", "borrowed"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "account", "flavor", "owner_key", "owner_username", "borrowed", "rate",
                        "fraction_numerator", "fraction_denominator"],
                name="one_usage_row_per_key", nulls_distinct=False),
            models.CheckConstraint(condition=models.Q(unit_seconds__gte=0), name="usage_unit_seconds_not_negative"),
        ]
        indexes = [models.Index(fields=["account", "hour"]), models.Index(fields=["hour", "flavor"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.account} {self.flavor}: {self.unit_seconds} unit-s"


class UsageMonth(models.Model):
    """The complete hours of one local month, summed: UsageHour rows of every hour before
    `MeteringState.months_through`, grouped without the hour and the owner (Slurm's
    usage_month level). A page that needs every team's month (the finance overview) reads these
    ~teams × flavors rows plus the still-open hours' UsageHour rows, in one statement, instead
    of a month of hourly rows. Kept by `billing.metering` with every write of hourly rows and
    checked against them by `billing.metering.recompute` (`manage.py billing_verify`)."""

    month = models.DateTimeField(help_text="The instant the billing time zone's month begins.")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    borrowed = models.BooleanField(default=False)
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    unit_seconds = models.BigIntegerField()

    class Meta:
        ordering = ["month", "account", "flavor", "borrowed"]
        constraints = [
            models.UniqueConstraint(
                fields=["month", "account", "flavor", "borrowed", "rate", "fraction_numerator", "fraction_denominator"],
                name="one_usage_month_row_per_key", nulls_distinct=False),
        ]
        # No CHECK on unit_seconds: metering adds differences with INSERT … ON CONFLICT DO UPDATE,
        # and PostgreSQL checks the row it would insert (a negative difference) before it finds the
        # conflict. recompute catches a wrong sum, negative or not.

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.account} {self.flavor}: {self.unit_seconds} unit-s"


class FlavorHour(models.Model):
    """What all teams together used of a flavor in one complete hour (before
    `MeteringState.months_through`), as unit-seconds: unallocated capacity is capacity minus
    this, so reading a month's unallocated hours costs ~hours × flavors rows, not every team's."""

    hour = models.DateTimeField()
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    unit_seconds = models.BigIntegerField()

    class Meta:
        ordering = ["hour", "flavor"]
        constraints = [
            models.UniqueConstraint(fields=["hour", "flavor"], name="one_flavor_row_per_hour"),
            models.CheckConstraint(condition=models.Q(unit_seconds__gt=0), name="flavor_hour_unit_seconds_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.flavor}: {self.unit_seconds} unit-s used"


class CapacityHour(models.Model):
    """A flavor's capacity in one hour, as unit-seconds: what unallocated capacity is measured against."""

    hour = models.DateTimeField()
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    unit_seconds = models.BigIntegerField()

    class Meta:
        ordering = ["hour", "flavor"]
        constraints = [models.UniqueConstraint(fields=["hour", "flavor"], name="one_capacity_row_per_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.flavor}: {self.unit_seconds} unit-s of capacity"


class GuaranteeHour(models.Model):
    """A team's guaranteed quota of a flavor in one hour, as unit-seconds: the weights when idle
    capacity is shared among teams, and the base of the lent ledger."""

    hour = models.DateTimeField()
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="guarantee_hours")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    unit_seconds = models.BigIntegerField()
    lends_idle = models.BooleanField(default=True)

    class Meta:
        ordering = ["hour", "account", "flavor"]
        constraints = [models.UniqueConstraint(fields=["hour", "account", "flavor"], name="one_guarantee_row_per_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.account} {self.flavor}: {self.unit_seconds} unit-s guaranteed"


class LentHour(models.Model):
    """What one team lent of one flavor in one hour to teams that borrowed it, as unit-seconds:
    `billing.ledger`'s rule applied when metering refreshes the hour, so reading a team's lent
    hours is one grouped query over its own rows."""

    hour = models.DateTimeField()
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="lent_hours")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    unit_seconds = models.BigIntegerField()

    class Meta:
        ordering = ["hour", "account", "flavor"]
        constraints = [
            models.UniqueConstraint(fields=["hour", "account", "flavor"], name="one_lent_row_per_hour"),
            models.CheckConstraint(condition=models.Q(unit_seconds__gt=0), name="lent_unit_seconds_positive"),
        ]
        indexes = [models.Index(fields=["account", "hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.account} {self.flavor}: {self.unit_seconds} unit-s lent"


class IdlePolicy(models.Model):
    """Finance's choice per flavor of what to do with capacity nobody used: show it apart as
    unallocated (the default, also for a flavor without a row), or share it among teams in
    proportion to their guaranteed quota in each hour, as OpenCost's shareIdle does."""

    class Mode(models.TextChoices):
        SHOW_APART = "apart", "Show apart as unallocated"
        SHARE_BY_GUARANTEE = "share", "Share among teams by guaranteed quota"

    flavor = models.OneToOneField(Flavor, on_delete=models.CASCADE, related_name="idle_policy")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.SHOW_APART)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.flavor}: {self.get_mode_display()}"


class MeteringState(models.Model):
    """One row: how far the rollups go (the watermark). Hours before the hour that holds it are
    complete (and summed into UsageMonth and FlavorHour); that hour and later are recomputed on
    each refresh. Refreshes lock this row."""

    metered_until = models.DateTimeField(null=True, blank=True)
    months_through = models.DateTimeField(
        null=True, blank=True, help_text="UsageMonth and FlavorHour hold exactly the hourly rows of the hours before "
                                         "this instant (the hour holding the watermark); later hours are read hourly.")
    refreshed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"metered until {self.metered_until}"
