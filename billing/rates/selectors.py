"""Reads of the rate card and the idle policies: the history finance keeps, each flavor's policy for
its unallocated capacity, and billing's answers on prices to the apps to its left (the launch
form's estimate, the catalog's unpriced flavors, the refusal of a launch nobody priced), each
through one `RateCard`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from billing.models import IdlePolicy, Rate
from billing.rates.card import HourlyCost, RateCard
from tenants.models import Flavor


def rate_history() -> list[Rate]:
    """Every price ever set, by flavor name and newest first, with who set it: one query, which a
    page also builds its `RateCard` from."""
    return list(Rate.objects.select_related("flavor", "created_by").order_by("flavor__name", "-effective_from"))


def priced_flavors(*, flavor_ids: Collection[int]) -> set[int]:
    """Which of the flavors have a rate in force now (one query)."""
    return RateCard.read(flavor_ids=flavor_ids).priced(flavor_ids, timezone.now())


def unpriced_refusal(*, flavors: Sequence[Flavor]) -> str | None:
    """Why nothing may launch on these flavors now: one of them has no rate in force, so its hours
    would be billed at nothing without anyone deciding that (a price of 0 is a decision; no price
    is not). None when every one has a rate. One query."""
    priced = priced_flavors(flavor_ids=[flavor.pk for flavor in flavors])
    unpriced = [flavor.name for flavor in flavors if flavor.pk not in priced]
    if not unpriced:
        return None
    one = len(unpriced) == 1
    return (f"{' and '.join(unpriced)} {'has' if one else 'have'} no price on the rate card yet, so "
            f"{'its' if one else 'their'} GPU-hours could not be billed: nothing launches on "
            f"{'it' if one else 'them'} until finance sets a rate.")


def hourly_cost(*, flavor: Flavor, units: int, at: dt.datetime | None = None) -> HourlyCost | None:
    """What `units` of the flavor cost per hour at the rate in force (now by default), or None
    without a rate: the launch form's estimate. One query."""
    return RateCard.read(flavor_ids=[flavor.pk]).hourly_cost(flavor, units, at or timezone.now())


@dataclass(frozen=True)
class IdlePolicyRow:
    """A flavor and what finance chose for its unallocated capacity (apart when never chosen)."""

    flavor: Flavor
    mode: str
    label: str


def idle_policy_rows(*, flavors: QuerySet[Flavor] | None = None) -> list[IdlePolicyRow]:
    """Every flavor (or those given) with its idle policy, by name: one query."""
    found = (flavors if flavors is not None else Flavor.objects.all()).select_related("idle_policy").order_by("name")
    rows = []
    for flavor in found:
        policy = getattr(flavor, "idle_policy", None)
        mode = policy.mode if policy is not None else IdlePolicy.Mode.SHOW_APART
        rows.append(IdlePolicyRow(flavor=flavor, mode=mode, label=IdlePolicy.Mode(mode).label))
    return rows
