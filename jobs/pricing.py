"""The launch form's cost estimate and the budget's word on a launch. Prices and budgets live in
billing, which depends on jobs and not the other way round, so billing registers both when it starts."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from tenants.models import Flavor, Team

PriceProvider = Callable[[Flavor, int], "tuple[Decimal, str] | None"]
_provider: PriceProvider | None = None


def register_price_provider(provider: PriceProvider) -> None:
    global _provider
    _provider = provider


def hourly_cost(*, flavor: Flavor, units: int) -> tuple[Decimal, str] | None:
    """Cost per hour of `units` of the flavor at the current rate, or None when there is none."""
    return _provider(flavor, units) if _provider else None


# A team over a budget with a hard stop may not launch; billing says so in a sentence.
LaunchGuard = Callable[[Team], "str | None"]
_launch_guard: LaunchGuard | None = None


def register_launch_guard(guard: LaunchGuard) -> None:
    global _launch_guard
    _launch_guard = guard


def launch_refusal(*, team: Team) -> str | None:
    """Why billing refuses a launch for the team now (a hard-stopped budget), or None."""
    return _launch_guard(team) if _launch_guard else None
