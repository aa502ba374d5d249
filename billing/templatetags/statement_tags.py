"""Money on statement pages and PDFs: shown at the currency's minor unit, as the lines were rounded."""

from __future__ import annotations

from decimal import Decimal

from django import template

from billing.money import minor_unit

register = template.Library()


@register.filter
def money(value: Decimal | None, currency: str) -> str:
    """4.000 stored for USD reads 4.00; for JPY, 4."""
    if value is None:
        return "—"
    return f"{Decimal(value).quantize(Decimal(1).scaleb(-minor_unit(currency))):,}"
