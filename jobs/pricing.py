"""The launch form's cost estimate. Prices live in billing, which depends on jobs and not the
other way round, so billing registers how to price a launch when it starts."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from tenants.models import Flavor

PriceProvider = Callable[[Flavor, int], "tuple[Decimal, str] | None"]
_provider: PriceProvider | None = None


def register_price_provider(provider: PriceProvider) -> None:
    global _provider
    _provider = provider


def hourly_cost(*, flavor: Flavor, units: int) -> tuple[Decimal, str] | None:
    """Cost per hour of `units` of the flavor at the current rate, or None when there is none."""
    return _provider(flavor, units) if _provider else None
