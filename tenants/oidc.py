"""Single sign-on: OpenID Connect group claims become platform roles and team memberships."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.models import User
from tenants.services import memberships_sync_from_groups


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload = super().verify_token(token, **kwargs)
        # The library checks the signature and nonce but not who the token was issued for.
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if settings.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token was issued for another client.")
        issuer = getattr(settings, "OIDC_OP_ISSUER", "")
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation("The ID token comes from an unexpected issuer.")
        return payload

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        username = claims.get("preferred_username") or claims.get("sub")
        return self.UserModel.objects.filter(username=username)

    def create_user(self, claims: dict[str, Any]) -> User:
        username = claims.get("preferred_username") or claims.get("sub")
        user = self.UserModel.objects.create_user(username=username, email=claims.get("email", ""))
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
        if isinstance(groups, str):
            groups = [groups]
        user.email = claims.get("email", user.email)
        user.first_name = claims.get("given_name", user.first_name)
        user.last_name = claims.get("family_name", user.last_name)
        user.is_platform_admin = any(g in settings.OIDC_ADMIN_GROUPS for g in groups)
        user.is_finance = any(g in settings.OIDC_FINANCE_GROUPS for g in groups)
        user.save()
        memberships_sync_from_groups(user=user, groups=groups)
        return user
