"""The launch form's cost estimate and a workload's cost so far. Prices and usage live in
billing, which depends on jobs and not the other way round, so billing registers how to price a
launch, how to read what workloads used, and the budget's word on a launch when it starts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Protocol

from tenants.models import Flavor, Team

PriceProvider = Callable[[Flavor, int], "tuple[Decimal, str] | None"]
_provider: PriceProvider | None = None


def register_price_provider(provider: PriceProvider) -> None:
    global _provider
    _provider = provider


def hourly_cost(*, flavor: Flavor, units: int) -> tuple[Decimal, str] | None:
    """Cost per hour of `units` of the flavor at the current rate, or None when there is none."""
    return _provider(flavor, units) if _provider else None


class UsedSoFar(Protocol):
    """What a workload has used: GPU-hours and, when its hours were priced, their cost."""

    @property
    def gpu_hours(self) -> Decimal: ...

    @property
    def cost(self) -> Decimal | None: ...

    @property
    def currency(self) -> str: ...


UsageProvider = Callable[[list[int]], "Mapping[int, UsedSoFar]"]
_usage_provider: UsageProvider | None = None


def register_usage_provider(provider: UsageProvider) -> None:
    global _usage_provider
    _usage_provider = provider


def used_so_far(*, workload_ids: list[int]) -> Mapping[int, UsedSoFar]:
    """GPU-hours and cost so far of each workload, read for all of them at once (billing fills it in)."""
    return _usage_provider(workload_ids) if _usage_provider else {}


# A team over a budget with a hard stop may not launch; billing says so in a sentence.
LaunchGuard = Callable[[Team], "str | None"]
_launch_guard: LaunchGuard | None = None


def register_launch_guard(guard: LaunchGuard) -> None:
    global _launch_guard
    _launch_guard = guard


def launch_refusal(*, team: Team) -> str | None:
    """Why billing refuses a launch for the team now (a hard-stopped budget), or None."""
    return _launch_guard(team) if _launch_guard else None
