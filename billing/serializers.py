"""What billing's API answers are made of: money shown with exactly its currency's decimals, and
GPU-hours with the pages' hundredths (billing.money's rule)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.money import ROUNDING_HOURS, minor_unit

MONEY_SCHEMA = {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$",
                "description": "An amount with as many decimals as the currency's minor unit (USD: 2, JPY: 0), "
                               "as a string, so no client reads it through a binary float."}


@extend_schema_field(MONEY_SCHEMA)
class MoneyField(serializers.Field):
    """An amount in the currency the serializer's context names (`currency`), with exactly its
    minor unit's decimals: 2476.47, never 2476.470. Read-only."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Decimal) -> str:
        currency = self.context.get("currency")
        if not currency:
            raise RuntimeError(f"{self.field_name}: money needs the currency in the serializer's context")
        return f"{Decimal(value).quantize(Decimal(1).scaleb(-minor_unit(currency))):f}"


@extend_schema_field({"type": "string", "pattern": r"^[0-9]+\.[0-9]{2}$",
                      "description": "Physical GPU-hours, to the hundredth."})
class HoursField(serializers.Field):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Decimal) -> str:
        return f"{Decimal(value).quantize(Decimal(1).scaleb(-ROUNDING_HOURS)):f}"
