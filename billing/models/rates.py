"""The rate card: what one physical GPU-hour of a flavor costs, from a moment on."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from billing.money import discount_words
from portal.models import User
from tenants.models import Flavor


class Rate(models.Model):
    """A price in force from `effective_from` until the next rate of the same flavor.

    Rates are never edited: a new price is a new row, so past periods keep the price they had.
    A unit of a shared or MIG flavor costs the price times its fraction of a GPU. Hours run on
    quota borrowed from other teams (which a lender's reclaim may preempt) cost the price less the
    rate's `borrowed_discount_percent`: the discount is dated with the price it belongs to.
    """

    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="rates")
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    currency = models.CharField(max_length=3, default="USD")
    borrowed_discount_percent = models.DecimalField(
        max_digits=5, decimal_places=2, default=0, db_default=0,
        help_text="Percent off the price for borrowed (preemptible) hours: 0 bills them as guaranteed ones.")
    effective_from = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["flavor", "-effective_from"]
        indexes = [models.Index(fields=["flavor", "-effective_from"])]
        constraints = [
            models.UniqueConstraint(fields=["flavor", "effective_from"], name="one_rate_per_flavor_and_moment"),
            models.CheckConstraint(condition=models.Q(borrowed_discount_percent__gte=0, borrowed_discount_percent__lte=100),
                                   name="rate_borrowed_discount_a_percent"),
        ]

    def __str__(self) -> str:
        off = f", borrowed {self.borrowed_discount}" if self.borrowed_discount_percent else ""
        return f"{self.flavor}: {self.price_per_gpu_hour} {self.currency}/GPU-hour{off} from {self.effective_from:%Y-%m-%d %H:%M}"

    @property
    def borrowed_discount(self) -> str:
        """Its discount for borrowed hours in words ("30 % off"); "" for none."""
        return discount_words(self.borrowed_discount_percent)
