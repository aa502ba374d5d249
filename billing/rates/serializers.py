"""What the rate card API reads and answers: prices and each flavor's idle policy."""

from __future__ import annotations

from rest_framework import serializers

from billing.models import IdlePolicy, Rate
from portal.adapters import StrictInputMixin
from portal.models import User
from tenants.models import Flavor


class RateSerializer(serializers.ModelSerializer):
    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="Who set it; null when the install's catalog or a since deleted account did.")

    class Meta:
        model = Rate
        fields = ["id", "flavor", "price_per_gpu_hour", "currency", "borrowed_discount_percent", "effective_from", "note",
                  "created_by", "created_at"]
        read_only_fields = fields


class RateCreateSerializer(StrictInputMixin, serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all(), help_text="The flavor's slug.")
    price_per_gpu_hour = serializers.CharField(max_length=20, help_text="Per physical GPU-hour, e.g. \"2.75\".")
    currency = serializers.CharField(max_length=3, default="USD")
    borrowed_discount_percent = serializers.CharField(
        max_length=20, required=False, default="0",
        help_text="Percent off the price for hours run on quota borrowed from other teams (preemptible), 0 to 100.")
    effective_from = serializers.DateTimeField(required=False, allow_null=True, help_text="Now when left out.")
    note = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)


class IdlePolicySerializer(serializers.Serializer):
    flavor = serializers.CharField(help_text="The flavor's slug.")
    mode = serializers.ChoiceField(choices=IdlePolicy.Mode.choices, help_text="“apart” (the default) or “share”.")
    mode_label = serializers.CharField(help_text="The policy in words.")


class IdlePolicySetSerializer(StrictInputMixin, serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all(), help_text="The flavor's slug.")
    mode = serializers.CharField(max_length=16, help_text="“apart”: show unallocated capacity apart; “share”: share "
                                                          "it among teams by guaranteed quota.")
