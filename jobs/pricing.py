"""The launch form's cost estimate, a workload's cost so far, and billing's word on a launch.

Prices, usage and budgets live in billing, which depends on jobs and not the other way round, so
jobs declares these hooks and billing fills them (`BillingConfig.ready`). They are required: a
portal without billing would launch on flavors nobody prices and past hard-stopped budgets, so it
does not start (portal.hooks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Protocol

from portal.hooks import Hook
from tenants.models import Flavor, Team


class HourlyPrice(Protocol):
    """What some units cost per hour at the current rate: guaranteed, and borrowed (preemptible)
    at the rate's discount, which `borrowed_discount` says in words ("" for none)."""

    @property
    def amount(self) -> Decimal: ...

    @property
    def currency(self) -> str: ...

    @property
    def borrowed_amount(self) -> Decimal: ...

    @property
    def borrowed_discount(self) -> str: ...


PriceProvider = Callable[[Flavor, int], "HourlyPrice | None"]
PRICE = Hook[PriceProvider]("jobs.pricing.PRICE", by="billing")


def hourly_cost(*, flavor: Flavor, units: int) -> HourlyPrice | None:
    """Cost per hour of `units` of the flavor at the current rate, or None when there is none."""
    return PRICE.call(flavor, units)


class UsedSoFar(Protocol):
    """What a workload has used: GPU-hours and, when its hours were priced, their cost."""

    @property
    def gpu_hours(self) -> Decimal: ...

    @property
    def cost(self) -> Decimal | None: ...

    @property
    def currency(self) -> str: ...


UsageProvider = Callable[[list[int]], "Mapping[int, UsedSoFar]"]
USAGE = Hook[UsageProvider]("jobs.pricing.USAGE", by="billing")


def used_so_far(*, workload_ids: list[int]) -> Mapping[int, UsedSoFar]:
    """GPU-hours and cost so far of each workload, read for all of them at once."""
    return USAGE.call(workload_ids)


# Why billing refuses a launch for the team on these flavors now (a flavor without a rate in
# force, a hard-stopped budget), in a sentence; None when it may go.
LaunchGuard = Callable[[Team, Sequence[Flavor]], "str | None"]
LAUNCH_GUARD = Hook[LaunchGuard]("jobs.pricing.LAUNCH_GUARD", by="billing")


def launch_refusal(*, team: Team, flavors: Sequence[Flavor]) -> str | None:
    return LAUNCH_GUARD.call(team, flavors)
