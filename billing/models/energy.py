"""GPU energy per team and hour, metered from telemetry once the hour is over (billing.energy)."""

from __future__ import annotations

from django.db import models

from billing.models.usage import Account


class EnergyHour(models.Model):
    """The watt-hours one team's GPUs drew in one hour: each of its pods' part of its card's power
    (a shared card's or a MIG GPU's draw split among the series reporting it), sampled each minute.
    Hours the team drew nothing have no row."""

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField(help_text="The hour's start (UTC).")
    watt_hours = models.DecimalField(max_digits=18, decimal_places=3)

    class Meta:
        ordering = ["hour", "account"]
        constraints = [models.UniqueConstraint(fields=["account", "hour"], name="energy_hour_once_per_account"),
                       models.CheckConstraint(condition=models.Q(watt_hours__gte=0), name="energy_hour_not_negative")]
        indexes = [models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.account} {self.hour:%Y-%m-%d %H:00}: {self.watt_hours} Wh"


class EnergyState(models.Model):
    """One row: energy is metered for every hour before `metered_through`; the last run's outcome."""

    metered_through = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    unavailable = models.CharField(max_length=300, blank=True, help_text="Why the last run read no telemetry.")

    def __str__(self) -> str:
        return f"energy metered through {self.metered_through}"
