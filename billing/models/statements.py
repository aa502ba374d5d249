"""Monthly chargeback statements: what finance hands to accounting for one month.

A statement exists only once a month is closed, and a closed statement never changes: its lines
are written once by `billing.statements.services.statement_close`, which seals the statement in the same
transaction; from then on the database itself refuses an INSERT, UPDATE or DELETE of its lines and
any change to the statement or its adjustments (triggers in migration `…_statements`, on
PostgreSQL and SQLite).
Corrections are adjustments, appended to the statement with an amount, a reason and who made them.

A line keeps copies of what it was billed for (the team's slug, name and cost center, the flavor's
name, the price), so the statement reads the same after a team, flavor or price changes. Its
quantities are exact: integer unit-seconds and the flavor's fraction of a GPU; the GPU-hours
beside them are for display only.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from django.contrib.auth.models import AnonymousUser
from django.db import models
from django.utils import timezone

from billing.models.rates import Rate
from billing.models.usage import Account
from billing.money import discount_words
from portal.models import User
from portal.roles import sees_all_teams
from tenants.models import Flavor, Membership


def led_accounts(user: User | AnonymousUser) -> models.QuerySet[Account]:
    """The billing accounts of the teams the user leads."""
    if not user.is_authenticated:
        return Account.objects.none()
    led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
    return Account.objects.filter(team_id__in=led)


class StatementQuerySet(models.QuerySet["Statement"]):
    def for_user(self, user: User | AnonymousUser) -> StatementQuerySet:
        """Finance and platform admins see every statement; a team lead those that bill their team."""
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self.all()
        return self.filter(pk__in=StatementLine.objects.filter(account__in=led_accounts(user)).values("statement_id"))


class Statement(models.Model):
    """One closed month in the billing time zone, in one currency."""

    month = models.DateField(unique=True, help_text="The first day of the month, on the billing zone's calendar.")
    period_start = models.DateTimeField(help_text="The instant the month began in the billing zone.")
    period_end = models.DateTimeField(help_text="The instant the next month began (the period is [start, end)).")
    currency = models.CharField(max_length=3)
    time_zone = models.CharField(max_length=64, help_text="The billing time zone the month was closed in.")
    charged_total = models.DecimalField(max_digits=20, decimal_places=3, default=0,
                                        help_text="The sum of the rounded lines charged to teams (usage and idle shares).")
    unallocated_total = models.DecimalField(max_digits=20, decimal_places=3, default=0,
                                            help_text="The sum of the rounded unallocated lines: capacity nobody used.")
    closed_at = models.DateTimeField(default=timezone.now)
    closed_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    closed_by_name = models.CharField(max_length=150, help_text="Kept when the account is deleted.")
    sealed = models.BooleanField(default=False, help_text="Set as the close commits; from then on the database "
                                 "refuses any change to the statement and its lines.")

    objects = StatementQuerySet.as_manager()

    class Meta:
        ordering = ["-month"]

    def __str__(self) -> str:
        return f"Statement {self.month:%Y-%m} ({self.currency})"

    @property
    def label(self) -> str:
        return f"{self.month:%B %Y}"

    @property
    def slug(self) -> str:
        return f"{self.month:%Y-%m}"


class StatementLine(models.Model):
    """What one team owes for one flavor at one price, or what capacity nobody used cost."""

    class Kind(models.TextChoices):
        USAGE = "usage", "Usage"
        UNALLOCATED = "unallocated", "Unallocated capacity"
        IDLE_SHARE = "idle_share", "Share of idle capacity"

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    account = models.ForeignKey(Account, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                help_text="Empty on an unallocated line.")
    account_slug = models.CharField(max_length=63, blank=True)
    account_name = models.CharField(max_length=120, blank=True)
    cost_center = models.CharField(max_length=60, blank=True)
    # db_default: SQLite adds the column in place, keeping the sealed-statement triggers (0006).
    department = models.CharField(max_length=120, blank=True, default="", db_default="",
                                  help_text="The team's department at close; \"\" for none.")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    flavor_slug = models.CharField(max_length=63)
    flavor_name = models.CharField(max_length=100)
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                             help_text="Empty while the flavor had no price: the line is then free.")
    period_start = models.DateTimeField(help_text="When this price began to apply within the month.")
    period_end = models.DateTimeField(help_text="When it stopped (the period is [start, end)).")
    fraction_numerator = models.PositiveSmallIntegerField()
    fraction_denominator = models.PositiveSmallIntegerField()
    guaranteed_unit_seconds = models.BigIntegerField()
    borrowed_unit_seconds = models.BigIntegerField(default=0)
    guaranteed_gpu_hours = models.DecimalField(max_digits=20, decimal_places=6, help_text="For display; exact in unit-seconds.")
    borrowed_gpu_hours = models.DecimalField(max_digits=20, decimal_places=6, help_text="For display; exact in unit-seconds.")
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    borrowed_discount_percent = models.DecimalField(
        max_digits=5, decimal_places=2, default=0, db_default=0,
        help_text="The rate's percent off for the borrowed unit-seconds: amount = guaranteed at the price + borrowed at "
                  "the price less this.")
    amount = models.DecimalField(max_digits=20, decimal_places=3, help_text="Rounded once, half-even, to the minor unit.")

    class Meta:
        ordering = ["statement", "kind", "account_slug", "flavor_slug", "period_start", "id"]
        indexes = [models.Index(fields=["statement", "account"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(guaranteed_unit_seconds__gte=0, borrowed_unit_seconds__gte=0),
                                   name="statement_line_unit_seconds_not_negative"),
            models.CheckConstraint(condition=models.Q(period_end__gt=models.F("period_start")),
                                   name="statement_line_period_not_empty"),
        ]

    def __str__(self) -> str:
        who = self.account_slug or "unallocated"
        return f"{who} {self.flavor_slug} {self.period_start:%Y-%m-%d}: {self.amount}"

    @property
    def gpu_seconds(self) -> Fraction:
        """Exact GPU-seconds, guaranteed and borrowed together."""
        units = self.guaranteed_unit_seconds + self.borrowed_unit_seconds
        return Fraction(units * self.fraction_numerator, self.fraction_denominator)

    @property
    def gpu_hours(self) -> Decimal:
        return self.guaranteed_gpu_hours + self.borrowed_gpu_hours

    @property
    def per_unit_hour(self) -> bool:
        """A CPU-only flavor's line: no part of a GPU (fraction 0), so no GPU-hours; its price is
        per unit-hour, and its quantity is shown in unit-hours."""
        return self.fraction_numerator == 0

    @property
    def borrowed_discount(self) -> str:
        """The discount its borrowed hours were billed at, in words ("30 % off"); "" when none were."""
        return discount_words(self.borrowed_discount_percent) if self.borrowed_unit_seconds else ""

    @property
    def guaranteed_unit_hours(self) -> Decimal:
        return Decimal(self.guaranteed_unit_seconds) / 3600

    @property
    def borrowed_unit_hours(self) -> Decimal:
        return Decimal(self.borrowed_unit_seconds) / 3600

    @property
    def unit_hours(self) -> Decimal:
        return self.guaranteed_unit_hours + self.borrowed_unit_hours


class Adjustment(models.Model):
    """A correction to a closed statement: a charge, or a credit (a negative amount)."""

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="adjustments")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+", help_text="The team it applies to.")
    account_slug = models.CharField(max_length=63, blank=True)
    account_name = models.CharField(max_length=120, blank=True)
    cost_center = models.CharField(max_length=60, blank=True)
    # db_default: SQLite adds the column in place, keeping the sealed-statement triggers (0006).
    department = models.CharField(max_length=120, blank=True, default="", db_default="",
                                  help_text="The team's department at close; \"\" for none.")
    amount = models.DecimalField(max_digits=20, decimal_places=3, help_text="Negative for a credit.")
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by_name = models.CharField(max_length=150, help_text="Kept when the account is deleted.")

    class Meta:
        ordering = ["statement", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.account_slug or 'all teams'}: {self.amount} ({self.reason[:40]})"


class StatementEnergy(models.Model):
    """One team's GPU energy in a closed month, copied from the metered hours when it closed, with
    the emission factor of that day: a statement reads the same after the factor changes. Sealed
    with its statement, as its lines are."""

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="energy")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    account_slug = models.CharField(max_length=63)
    watt_hours = models.DecimalField(max_digits=18, decimal_places=3)
    kwh = models.DecimalField(max_digits=18, decimal_places=2, help_text="Rounded once, half-even (billing.energy).")
    emission_factor = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True,
                                          help_text="kg CO₂e per kWh when the month closed; empty: none was set.")
    kg_co2e = models.DecimalField(max_digits=18, decimal_places=2, null=True, blank=True)
    metered_through = models.DateTimeField(help_text="Energy was metered up to here when the month closed.")

    class Meta:
        ordering = ["statement", "account_slug", "id"]
        constraints = [models.UniqueConstraint(fields=["statement", "account"], name="statement_energy_once_per_team")]

    def __str__(self) -> str:
        return f"{self.account_slug} {self.statement.slug}: {self.kwh} kWh"
