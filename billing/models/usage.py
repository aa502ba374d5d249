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
from django.utils import timezone

from billing.models.rates import Rate
from tenants.models import Flavor, Team


class Account(models.Model):
    """A team as billing knows it: made with the team and kept after the team is deleted, so
    metered hours and statements outlive what produced them. Name and cost center follow the
    team while it exists and keep their last values afterwards."""

    team = models.OneToOneField(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="billing_account")
    slug = models.CharField(max_length=63)
    name = models.CharField(max_length=120)
    cost_center = models.CharField(max_length=60, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    team_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["slug", "id"]

    def __str__(self) -> str:
        return self.slug if self.team_deleted_at is None else f"{self.slug} (deleted)"


class UsageHour(models.Model):
    """What one team's person used of one flavor in one hour, guaranteed or borrowed, at one rate.

    A row's key is everything a statement line or a page groups by, so no page or statement ever
    reads raw run intervals for a month. An hour in which the price changed has a row per rate.
    """

    hour = models.DateTimeField(help_text="The instant the billing time zone's clock shows hh:00.")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="usage_hours")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    owner_username = models.CharField(max_length=150, help_text="Who launched the workloads; kept if the user goes.")
    borrowed = models.BooleanField(default=False, help_text="Run on another team's idle quota.")
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                             help_text="The rate in force; empty while the flavor had no price.")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    unit_seconds = models.BigIntegerField(help_text="Units × seconds; GPU-seconds are this × the fraction.")

    class Meta:
        ordering = ["hour", "account", "flavor", "owner_username", "borrowed"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "account", "flavor", "owner_username", "borrowed", "rate",
                        "fraction_numerator", "fraction_denominator"],
                name="one_usage_row_per_key", nulls_distinct=False),
            models.CheckConstraint(condition=models.Q(unit_seconds__gte=0), name="usage_unit_seconds_not_negative"),
        ]
        indexes = [models.Index(fields=["account", "hour"]), models.Index(fields=["hour", "flavor"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} {self.account} {self.flavor}: {self.unit_seconds} unit-s"


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
