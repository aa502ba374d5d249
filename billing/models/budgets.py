"""Budgets: a team's monthly spending limit, the alerts it has had this month, and how each
person wants budget alerts by email (as they happen, or one digest a day)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from billing.models.usage import Account
from portal.models import User


class Budget(models.Model):
    """What a team may spend in a calendar month of the billing time zone.

    Changed only by `billing.budgets.services.budget_set`, which writes an audit event for every change
    (the history). `held` is the last decision of the hard stop: the team's LocalQueue is held
    (Kueue's `stopPolicy: Hold`) while it is true, so the team's desired state can read it in
    one query and the periodic check reconciles the team only when it flips.
    """

    account = models.OneToOneField(Account, on_delete=models.PROTECT, related_name="budget")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3, default="USD")
    hard_stop = models.BooleanField(
        default=False, help_text="At 100 % new launches are refused and the team's queue admits nothing new.")
    held = models.BooleanField(default=False, help_text="The hard stop is in force now (set by the budget check).")
    set_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    set_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["account"]
        constraints = [models.CheckConstraint(condition=models.Q(amount__gt=0), name="budget_amount_positive")]

    def __str__(self) -> str:
        return f"{self.account}: {self.amount} {self.currency} a month"


class BudgetAlert(models.Model):
    """One alert sent for one threshold of one account's month. The unique key is what makes an
    alert go once: two checks at once both try to insert it and only one succeeds."""

    class Threshold(models.TextChoices):
        HALF = "50", "50 %"
        EIGHTY = "80", "80 %"
        FULL = "100", "100 %"
        FORECAST = "forecast", "forecast over budget"

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="budget_alerts")
    month = models.DateField(help_text="The first day of the month, in the billing time zone.")
    threshold = models.CharField(max_length=10, choices=Threshold.choices)
    sent_at = models.DateTimeField(default=timezone.now)
    spent = models.DecimalField(max_digits=14, decimal_places=2)
    budget_amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    message = models.TextField()

    class Meta:
        ordering = ["-month", "-sent_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["account", "month", "threshold"], name="one_budget_alert_per_threshold")]

    def __str__(self) -> str:
        return self.message


class AlertEmailPreference(models.Model):
    """How a person gets budget alerts by email: each as it happens (no row, the default) or one
    digest a day. In-app notifications are immediate either way."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="alert_email_preference")
    daily_digest = models.BooleanField(default=False)
    last_digest_on = models.DateField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user}: {'daily digest' if self.daily_digest else 'each alert'}"


class DigestEntry(models.Model):
    """A budget alert waiting for its recipient's daily digest email."""

    recipient = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    message = models.TextField()
    url = models.CharField(max_length=300, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["recipient", "created_at", "id"]
        indexes = [models.Index(fields=["recipient", "sent_at"])]

    def __str__(self) -> str:
        return self.message
