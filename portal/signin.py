"""Throttling of password sign-ins: too many failures lock the account name, and separately the
client address, for a while.

Failures are counted per name typed, whether or not such an account exists, so the lockout says
nothing about which names are real. Counting per address stops one client trying many names;
counting per name stops many clients trying one. The counters live in the cache (see CACHES).

`SignInLockout` refuses while a lock holds, so every password form (the portal's and the
admin's) is covered; `SignInForm` says why on the login page. The failures themselves are counted
from Django's `user_login_failed` signal. API tokens are not passwords and are not counted.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.conf import settings
from django.contrib.auth import user_logged_in, user_login_failed
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest

from portal import limits


@dataclass(frozen=True)
class Lockout:
    what: str  # "account" or "address", as the sentence names it
    seconds_left: int

    @property
    def sentence(self) -> str:
        whom = "this account" if self.what == "account" else "this network address"
        return f"Too many failed sign-ins for {whom}; try again in {limits.in_words(self.seconds_left)}."


def client_address(request: HttpRequest | None) -> str:
    """The address the request came from. Behind PORTAL_PROXY_HOPS trusted proxies, each
    appending to X-Forwarded-For, it is that many entries from the right: entries further left
    are whatever the client chose to send."""
    if request is None:
        return ""
    hops = settings.PORTAL_PROXY_HOPS
    if hops:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return str(request.META.get("REMOTE_ADDR", ""))


def _key(kind: str, what: str, value: str) -> str:
    # Hashed: a typed name may hold anything, and a cache key must not.
    return f"signin:{kind}:{what}:{hashlib.sha256(value.encode()).hexdigest()}"


def _subjects(username: str, address: str) -> list[tuple[str, str]]:
    subjects = [("account", username.casefold())]
    if address:
        subjects.append(("address", address))
    return subjects


def lockout_for(*, username: str, address: str) -> Lockout | None:
    """The lock that holds for this name or address now, if any."""
    now = limits.clock()
    for what, value in _subjects(username, address):
        key = _key("lock", what, value)
        until = limits.guarded("Sign-in lockout check", partial(cache.get, key), None)
        if until is not None and until > now:
            return Lockout(what=what, seconds_left=max(math.ceil(until - now), 1))
    return None


def failure_record(*, username: str, address: str) -> None:
    """Counts a failed sign-in; the one that reaches the limit within the window starts a lockout."""
    window, lockout = settings.PORTAL_LOGIN_FAILURE_WINDOW_SECONDS, settings.PORTAL_LOGIN_LOCKOUT_SECONDS
    for what, value in _subjects(username, address):
        counter = _key("failures", what, value)
        failures = limits.increment(counter, timeout=window)  # the window runs from the first failure
        if failures >= settings.PORTAL_LOGIN_FAILURE_LIMIT:
            lock = _key("lock", what, value)
            limits.guarded("Sign-in lockout", partial(cache.set, lock, limits.clock() + lockout, timeout=lockout), None)
            limits.guarded("Sign-in failure count reset", partial(cache.delete, counter), False)


def success_record(*, username: str) -> None:
    """A right password ends the account's run of failures; the address's count stands, so one
    known account cannot be used to reset the count while guessing others."""
    key = _key("failures", "account", username.casefold())
    limits.guarded("Sign-in failure count reset", partial(cache.delete, key), False)


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    username = credentials.get("username")
    if isinstance(username, str) and username:  # SSO callbacks carry no username: not a password
        failure_record(username=username, address=client_address(request))


@receiver(user_logged_in)
def _clear_failures(sender: Any, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any) -> None:
    success_record(username=user.get_username())


class SignInLockout:
    """Listed before Django's ModelBackend: while the name or the address is locked out it stops
    the sign-in (PermissionDenied ends authenticate() without asking later backends); otherwise
    it steps aside. It has no get_user(), so it never owns a session: sessions keep naming
    ModelBackend, and the ones open before this backend existed stay valid."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> None:
        if username and lockout_for(username=username, address=client_address(request)) is not None:
            raise PermissionDenied

    async def aauthenticate(self, request: HttpRequest | None, username: str | None = None,
                            password: str | None = None, **kwargs: Any) -> None:
        await sync_to_async(self.authenticate)(request, username=username, password=password, **kwargs)


class SignInForm(AuthenticationForm):
    """The login form, saying how long a lockout lasts instead of "wrong password"."""

    lockout: Lockout | None = None

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        address = client_address(self.request)
        lockout = lockout_for(username=username, address=address) if username else None
        if lockout is None:
            try:
                return super().clean()
            except forms.ValidationError:
                # This failure may be the one that started a lockout: say so at once.
                lockout = lockout_for(username=username, address=address)
                if lockout is None:
                    raise
        self.lockout = lockout
        raise forms.ValidationError(lockout.sentence, code="locked_out")
