"""Single sign-on: OpenID Connect group claims become platform roles and team memberships.

An SSO account is found by its (issuer, subject) pair in `portal.SsoIdentity`, never by
username or email: a provider account named like a local one gets an account of its own, and
an account with a usable local password is never logged into by single sign-on.
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.module_loading import import_string
from django_htmx.http import HttpResponseClientRedirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from rest_framework.permissions import SAFE_METHODS

from portal.audit import audit_record
from portal.models import SsoIdentity, User
from tenants.services import sso_roles_apply

# What Django's username validator accepts; anything else in a provider's name becomes "-".
_NOT_USERNAME = re.compile(r"[^\w.@+-]")


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

    def get_user(self, user_id: Any) -> User | None:
        """The session's user, unless deactivated (tenants/people.py): Django's ModelBackend asks,
        the library does not, so a deactivated SSO account's session would have carried on."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        claims = dict(super().get_userinfo(access_token, id_token, payload))
        # Userinfo carries no issuer and its subject is only trustworthy when it is the signed
        # ID token's (OpenID Connect Core 5.3.2), so identity comes from the verified token.
        if "sub" in claims and str(claims["sub"]) != str(payload.get("sub")):
            raise SuspiciousOperation("The userinfo answer is about another subject than the ID token.")
        if not payload.get("iss") or not payload.get("sub"):
            raise SuspiciousOperation("The ID token names no issuer or subject.")
        claims["iss"], claims["sub"] = str(payload["iss"]), str(payload["sub"])
        return claims

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        linked = self.UserModel.objects.filter(sso_identity__issuer=claims["iss"], sso_identity__subject=claims["sub"])
        if linked.exists() or not settings.OIDC_ADOPT_UNLINKED_ACCOUNTS:
            return linked
        # Accounts made by single sign-on before identities were recorded have no identity yet.
        # Only one the old code could have made is adopted: no password (so nobody signs in to
        # it locally), no identity of its own, no superuser or staff bit.
        username = claims.get("preferred_username") or claims["sub"]
        return self.UserModel.objects.filter(
            username=username, sso_identity__isnull=True, password__startswith=UNUSABLE_PASSWORD_PREFIX,
            is_superuser=False, is_staff=False,
        )

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> User:
        wanted = claims.get("preferred_username") or claims["sub"]
        base = _NOT_USERNAME.sub("-", str(wanted))[:140] or "user"
        user = None
        for attempt in range(1, 100):
            username = base if attempt == 1 else f"{base}-{attempt}"
            if self.UserModel.objects.filter(username__iexact=username).exists():
                continue
            try:
                with transaction.atomic():
                    # No password: an SSO account can only be entered through its provider.
                    user = self.UserModel.objects.create_user(username=username, email=claims.get("email", ""))
            except IntegrityError:
                continue  # another login took the name between the check and the insert
            break
        if user is None:
            raise SuspiciousOperation(f"No free username near “{base}” for a new single sign-on account.")
        SsoIdentity.objects.create(user=user, issuer=claims["iss"], subject=claims["sub"])
        audit_record(actor=None, action="user.created", obj=user,
                     message=f"{user.username} signed in for the first time through single sign-on")
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        if user.has_usable_password():
            # An admin gave this account a local password: it is no longer the provider's to enter.
            raise SuspiciousOperation(f"{user.username} has a local password; single sign-on may not log into it.")
        if not SsoIdentity.objects.filter(user=user).exists():
            SsoIdentity.objects.create(user=user, issuer=claims["iss"], subject=claims["sub"])
            audit_record(actor=None, action="sso_identity.linked", obj=user,
                         message=f"{user.username} was linked to subject {claims['sub']} of {claims['iss']}"
                         " at their first single sign-on since identities are recorded")
        user.email = claims.get("email", user.email)
        user.first_name = claims.get("given_name", user.first_name)
        user.last_name = claims.get("family_name", user.last_name)
        # The provider's groups are the whole truth for an SSO account, and this login is the
        # provider vouching for them now: revalidation counts its window from here.
        sso_roles_apply(user=user, groups=claims.get(settings.OIDC_GROUPS_CLAIM), source="single sign-on")
        SsoIdentity.objects.filter(user=user).update(confirmed_at=timezone.now())
        return user


RENEW_FIRST = ("Your single sign-on has to be confirmed again before you change anything, so nothing was changed. "
               "The portal confirms it with your identity provider as you open a page; then do it again.")
RENEW_FIRST_API = ("Your single sign-on session has to be confirmed again before it may change anything, so nothing "
                   "was changed: open a portal page in the browser to confirm it, then send this again (scripts: use "
                   "an API token).")


class PortalSessionRefresh(SessionRefresh):
    """Sends a signed-in SSO user back to the provider, silently, when the ID token is older
    than OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS, so group changes and disabled accounts take effect.

    The library does so on a page load (a GET); a change (POST, PUT, PATCH, DELETE) from a session
    whose ID token expired is refused instead, before the view: its body cannot ride along to the
    provider and back, and letting it through would act on roles the provider no longer vouches
    for (a platform admin removed from the group could still create a team). The API answers 401
    with a sentence; a page, or an htmx request (HX-Redirect), is sent back to where it was, and
    that page's load renews the session.

    htmx reads (GET) are left alone: a fetch cannot follow a redirect to the provider, and the
    next full page load refreshes.
    """

    @cached_property
    def exempt_urls(self) -> set[str]:
        # Signing out needs no fresh word from the provider.
        return {*super().exempt_urls, reverse("logout")}

    def is_refreshable_url(self, request: HttpRequest) -> bool:
        if request.headers.get("HX-Request"):
            return False
        return bool(super().is_refreshable_url(request))

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if request.method not in SAFE_METHODS and self._expired_sso_session(request):
            return self._renew_first(request)
        response: HttpResponse | None = super().process_request(request)
        return response

    def _expired_sso_session(self, request: HttpRequest) -> bool:
        backend = request.session.get(BACKEND_SESSION_KEY)
        if not backend or not request.user.is_authenticated:
            return False
        if not issubclass(import_string(backend), OIDCAuthenticationBackend):
            return False  # a local account's session: no provider to ask
        if request.path in self.exempt_urls or any(pattern.match(request.path) for pattern in self.exempt_url_patterns):
            return False
        return bool(request.session.get("oidc_id_token_expiration", 0) <= time.time())

    @staticmethod
    def _renew_first(request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith("/api/"):
            return JsonResponse({"message": RENEW_FIRST_API, "errors": {}}, status=401)
        back = _back(request)
        if request.headers.get("HX-Request"):
            return HttpResponseClientRedirect(back, content=RENEW_FIRST, status=401, content_type="text/plain; charset=utf-8")
        messages.warning(request, RENEW_FIRST)
        return HttpResponseRedirect(back)


def _back(request: HttpRequest) -> str:
    """The page the change was sent from (htmx's HX-Current-URL, else the Referer), on this site
    only; the home page otherwise. Loading it renews the session."""
    for candidate in (request.headers.get("HX-Current-URL", ""), request.headers.get("Referer", "")):
        if candidate and url_has_allowed_host_and_scheme(candidate, allowed_hosts={request.get_host()},
                                                         require_https=request.is_secure()):
            parts = urlsplit(candidate)
            return urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return "/"
