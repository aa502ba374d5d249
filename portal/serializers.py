"""What the portal's own API endpoints read and write: notifications and API tokens."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from portal.adapters import WholeNumberSerializerField
from portal.models import ApiToken, Notification


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "created_at", "message", "url", "read_at"]
        read_only_fields = fields


class ApiTokenSerializer(serializers.ModelSerializer):
    expires_in_days = WholeNumberSerializerField(write_only=True, min_value=1, max_value=settings.API_TOKEN_MAX_DAYS)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "scope", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at", "status",
                  "expires_in_days"]
        read_only_fields = ["id", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at", "status"]


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    """The answer to create, the only one that carries the secret: the schema must not promise it
    in a list or a revoke, which never have it."""

    secret = serializers.CharField(read_only=True, help_text="Shown once, in the answer to create.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "secret"]
