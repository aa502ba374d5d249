"""API tokens: create, list, revoke, and the DRF authentication that reads them."""

from __future__ import annotations

import datetime as dt
import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from portal.audit import audit_record
from portal.errors import DomainError, NotAllowed, StateConflict
from portal.models import ApiToken, User

TOKEN_PREFIX = "gpp_"


@transaction.atomic
def api_token_create(
    *, user: User, name: str, expires_in_days: int | None, scope: str = ApiToken.Scope.WRITE,
    created_with: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Returns the token and its secret. The secret is never stored and cannot be shown again.

    `created_with` is the token that authenticated the request, if one did: a token may not
    mint another, or a short-lived or leaked token could outlive its own expiry and revocation.
    """
    if created_with is not None:
        raise NotAllowed(
            "An API token cannot create tokens. Create one on the API tokens page, signed in as yourself."
        )
    if scope not in ApiToken.Scope.values:
        raise DomainError("A token's scope is “read” or “write”.", field="scope")
    name = name.strip()
    if not name:
        raise DomainError("Give the token a name, e.g. the script or laptop that will use it.", field="name")
    limit = settings.API_TOKEN_MAX_DAYS
    if expires_in_days is None or not 1 <= expires_in_days <= limit:
        raise DomainError(f"A token expires after 1 to {limit} days.", field="expires_in_days")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=secret[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + ApiToken.PREFIX_LENGTH],
        digest=ApiToken.digest_of(secret),
        expires_at=timezone.now() + dt.timedelta(days=expires_in_days),
        scope=scope,
    )
    audit_record(actor=user, action="api_token.created", obj=token,
                 message=f"{user.username} created {token.get_scope_display().lower()} API token “{token.name}”"
                 f" expiring {token.expires_at:%Y-%m-%d}")
    return token, secret


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor: User) -> ApiToken:
    if not actor.has_perm("portal.revoke_apitoken", token):
        raise DomainError("You can only revoke your own tokens.")
    if token.revoked_at:
        raise StateConflict(f"Token “{token.name}” is already revoked.")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="api_token.revoked", obj=token,
                 message=f"{actor.username} revoked API token “{token.name}” of {token.user.username}")
    return token


@transaction.atomic
def api_tokens_revoke_all(*, user: User, reason: str) -> int:
    """Revokes every token of a user who lost what the tokens acted on. No actor: the portal
    does it (single sign-on took their last role), so no permission is asked."""
    now = timezone.now()
    revoked = list(ApiToken.objects.filter(user=user).usable().select_for_update())
    for token in revoked:
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        audit_record(actor=None, action="api_token.revoked", obj=token,
                     message=f"API token “{token.name}” of {user.username} was revoked: {reason}")
    return len(revoked)


class TokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token gpp_…` (or `Bearer`)."""

    keywords = ("token", "bearer")

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("The Authorization header must be “Token <secret>”.")
        token = ApiToken.objects.usable().select_related("user").filter(digest=ApiToken.digest_of(header[1])).first()
        if token is None:
            raise exceptions.AuthenticationFailed(
                "This API token is unknown, revoked or expired. Create a new one under API tokens."
            )
        if token.scope == ApiToken.Scope.READ and request.method not in permissions.SAFE_METHODS:
            # Refused here rather than in a permission class, so no view can forget to ask.
            raise exceptions.PermissionDenied(
                f"Token “{token.name}” is read-only: it may only read. Use a read-and-write token to change things."
            )
        now = timezone.now()
        if not token.last_used_at or now - token.last_used_at > dt.timedelta(minutes=1):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return "Token"
