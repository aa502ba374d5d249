"""Writes of the rate card: a new price (never an edit: the past keeps its prices) and a
flavor's idle policy. Both are finance's and platform admins', audited."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from billing.models import IdlePolicy, Rate
from billing.money import discount_words, money_input
from portal.audit import audit_record
from portal.errors import DomainError
from portal.models import User
from tenants.models import Flavor


@transaction.atomic
def rate_set(*, actor: User, flavor: Flavor, price_per_gpu_hour: Any, currency: str = "USD",
             effective_from: dt.datetime | None = None, note: str = "", borrowed_discount_percent: Any = 0) -> Rate:
    """A new price from now or a later moment, with its discount for borrowed (preemptible) hours;
    the past keeps the prices it had."""
    if not actor.has_perm("billing.set_rates"):
        raise PermissionDenied
    per = "unit-hour" if flavor.is_cpu else "GPU-hour"  # a CPU-only flavor's unit is its cores and memory
    price = money_input(price_per_gpu_hour, column=Rate._meta.get_field("price_per_gpu_hour"), field="price_per_gpu_hour",
                        noun="price", unit=f" per {per}", example="2.75")
    if price < 0:
        raise DomainError(f"A price per {per} is zero or more.", field="price_per_gpu_hour")
    discount = _discount(flavor, borrowed_discount_percent)
    now = timezone.now()
    effective_from = effective_from or now
    if effective_from < now - dt.timedelta(minutes=1):
        raise DomainError("A rate cannot start in the past: hours already used keep the price they had.",
                          field="effective_from")
    currency = currency.strip().upper()
    if len(currency) != 3 or not currency.isalpha():
        raise DomainError("The currency is a three-letter code such as USD or EUR.", field="currency")
    rate = Rate.objects.create(flavor=flavor, price_per_gpu_hour=price, currency=currency, effective_from=effective_from,
                               note=note.strip(), created_by=actor, borrowed_discount_percent=discount)
    off = f", borrowed hours {discount_words(discount)}" if discount else ""
    audit_record(actor=actor, action="rate.set", obj=rate,
                 message=f"{actor.username} set {flavor.name} to {price} {currency} per {per}{off}"
                 f" from {effective_from:%Y-%m-%d %H:%M}")
    return rate


def _discount(flavor: Flavor, value: Any) -> Decimal:
    """The percent off for borrowed hours, as typed (empty is none): 0 to 100, two decimals at most."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return Decimal(0)
    discount = money_input(value, column=Rate._meta.get_field("borrowed_discount_percent"), field="borrowed_discount_percent",
                           noun="discount", unit=" for borrowed hours", example="30 (percent)", most=Decimal(100))
    if discount < 0:
        raise DomainError("A discount for borrowed hours is a percent from 0 to 100.", field="borrowed_discount_percent")
    if discount and flavor.is_cpu:
        raise DomainError(f"{flavor.name} is CPU only: its units are never borrowed from other teams, so it has no "
                          "discount for borrowed hours.", field="borrowed_discount_percent")
    return discount


@transaction.atomic
def idle_policy_set(*, actor: User, flavor: Flavor, mode: str) -> IdlePolicy:
    """Finance's choice for a flavor's unallocated capacity: shown apart, or shared among teams by
    guaranteed quota. The ledger applies it when it is read; closed statements keep theirs."""
    if not actor.has_perm("billing.set_rates"):
        raise PermissionDenied
    if mode not in IdlePolicy.Mode.values:
        choices = " or ".join(f"“{value}” ({label.lower()})" for value, label in IdlePolicy.Mode.choices)
        raise DomainError(f"“{mode}” is not an idle policy; choose {choices}.", field="mode")
    policy, _ = IdlePolicy.objects.select_for_update().get_or_create(flavor=flavor)
    if policy.mode != mode:
        policy.mode, policy.updated_at = mode, timezone.now()
        policy.save(update_fields=["mode", "updated_at"])
        audit_record(actor=actor, action="idle_policy.set", obj=policy,
                     message=f"{actor.username} set {flavor.name}'s unallocated capacity to: {policy.get_mode_display()}")
    return policy
