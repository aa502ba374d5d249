"""Throttling of password sign-ins: failures slow down the one who fails, never the owner
elsewhere.

Failures are counted per account name and client address together (the *pair*): after
PORTAL_LOGIN_FAILURES_BEFORE_WAIT of them, that pair waits PORTAL_LOGIN_BACKOFF_SECONDS before its
next try, twice as long after each further failure, up to PORTAL_LOGIN_BACKOFF_MAX_SECONDS. Other
addresses are not slowed by them, so failures from elsewhere cannot lock the owner (the
break-glass admin included) out of their own account. A right password ends the pair's run.

Across addresses, an account whose name failed more than PORTAL_LOGIN_ACCOUNT_CEILING times in the
window is under attack from many addresses: every address then waits from its first failure of
that name. An address with no failure of that name still gets its try, so a right password from
it is slowed by nothing and never locked out. Separately, an address that fails
PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT times across names waits the same way (one client trying
many names). Counts start again every PORTAL_LOGIN_FAILURE_WINDOW_SECONDS (fixed windows on the
clock, as the launch rate's in portal/limits.py); a wait already running runs out.

Failures are counted per name typed, whether or not such an account exists, so a wait says
nothing about which names are real. A try refused because its pair or address is waiting is not
counted again: the wait is the answer. The counters live in the cache (see CACHES); while it does
not answer, nothing is counted and nothing refused.

`SignInLockout` refuses while a wait holds, so every password form (the portal's and the admin's)
is covered; `SignInForm` says how long on the login page. The failures themselves are counted from
Django's `user_login_failed` signal. API tokens and single sign-on are not passwords and are not
counted.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

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

Subject = Literal["pair", "address"]
# Set on a request whose sign-in SignInLockout refused, so the signal it causes counts no failure.
_REFUSED_ATTRIBUTE = "portal_signin_refused"


@dataclass(frozen=True)
class Lockout:
    what: Subject
    seconds_left: int

    @property
    def sentence(self) -> str:
        whom = "this account from your network address" if self.what == "pair" else "this network address"
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


def _key(kind: str, what: str, *values: str) -> str:
    # Hashed: a typed name may hold anything, and a cache key must not. The NUL cannot be typed in
    # either part, so no name and address run together into another pair.
    return f"signin:{kind}:{what}:{hashlib.sha256(chr(0).join(values).encode()).hexdigest()}"


def _count_key(what: str, *values: str) -> str:
    """The counter of failures in the current window: the window's number is part of its key."""
    window = settings.PORTAL_LOGIN_FAILURE_WINDOW_SECONDS
    return f"{_key('failures', what, *values)}:{int(limits.clock() // window)}"


def _subjects(username: str, address: str) -> list[tuple[Subject, tuple[str, ...]]]:
    subjects: list[tuple[Subject, tuple[str, ...]]] = [("pair", (username.casefold(), address))]
    if address:
        subjects.append(("address", (address,)))
    return subjects


def backoff_seconds(*, failures: int, before_wait: int) -> int:
    """How long to wait after the `failures`-th failure: nothing before `before_wait` of them,
    then PORTAL_LOGIN_BACKOFF_SECONDS, doubling with each further failure up to the maximum."""
    if failures < max(before_wait, 1):
        return 0
    doublings = min(failures - max(before_wait, 1), 30)  # 2**30 base seconds is past any maximum
    return int(min(settings.PORTAL_LOGIN_BACKOFF_SECONDS * 2 ** doublings, settings.PORTAL_LOGIN_BACKOFF_MAX_SECONDS))


def lockout_for(*, username: str, address: str) -> Lockout | None:
    """The longest wait that holds for this name from this address, or for the address, now."""
    now = limits.clock()
    found: Lockout | None = None
    for what, values in _subjects(username, address):
        until = limits.guarded("Sign-in wait check", partial(cache.get, _key("wait", what, *values)), None)
        if until is not None and until > now:
            left = max(math.ceil(until - now), 1)
            if found is None or left > found.seconds_left:
                found = Lockout(what=what, seconds_left=left)
    return found


def failure_record(*, username: str, address: str) -> None:
    """Counts a failed sign-in against the name from this address, the address, and the name
    across addresses; a pair or address past its free failures starts (or lengthens) its wait."""
    window = settings.PORTAL_LOGIN_FAILURE_WINDOW_SECONDS + 1  # the cache may drop it once its window is over
    across = limits.increment(_count_key("account", username.casefold()), timeout=window)
    under_attack = across > settings.PORTAL_LOGIN_ACCOUNT_CEILING
    free = {"pair": 0 if under_attack else settings.PORTAL_LOGIN_FAILURES_BEFORE_WAIT,
            "address": settings.PORTAL_LOGIN_ADDRESS_FAILURES_BEFORE_WAIT}
    for what, values in _subjects(username, address):
        failures = limits.increment(_count_key(what, *values), timeout=window)
        wait = backoff_seconds(failures=failures, before_wait=free[what]) if failures else 0
        if wait:
            until = limits.clock() + wait
            limits.guarded("Sign-in wait", partial(cache.set, _key("wait", what, *values), until, timeout=wait + 1), None)


def success_record(*, username: str, address: str) -> None:
    """A right password ends this pair's run of failures. The address's count stands, so one
    known account cannot reset it while guessing others, and so does the account's count across
    addresses, which says what others tried."""
    for key in (_count_key("pair", username.casefold(), address), _key("wait", "pair", username.casefold(), address)):
        limits.guarded("Sign-in failure count reset", partial(cache.delete, key), False)


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    username = credentials.get("username")
    if not isinstance(username, str) or not username:  # SSO callbacks carry no username: not a password
        return
    if request is not None and getattr(request, _REFUSED_ATTRIBUTE, False):
        return  # refused while waiting: no password was tried
    failure_record(username=username, address=client_address(request))


@receiver(user_logged_in)
def _clear_failures(sender: Any, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any) -> None:
    success_record(username=user.get_username(), address=client_address(request))


class SignInLockout:
    """Listed before Django's ModelBackend: while this name from this address, or the address,
    must wait, it stops the sign-in (PermissionDenied ends authenticate() without asking later
    backends); otherwise it steps aside. It has no get_user(), so it never owns a session:
    sessions keep naming ModelBackend, and the ones open before this backend existed stay valid."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> None:
        if username and lockout_for(username=username, address=client_address(request)) is not None:
            if request is not None:
                setattr(request, _REFUSED_ATTRIBUTE, True)
            raise PermissionDenied

    async def aauthenticate(self, request: HttpRequest | None, username: str | None = None,
                            password: str | None = None, **kwargs: Any) -> None:
        await sync_to_async(self.authenticate)(request, username=username, password=password, **kwargs)


class SignInForm(AuthenticationForm):
    """The login form, saying how long to wait instead of "wrong password"."""

    lockout: Lockout | None = None

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        address = client_address(self.request)
        lockout = lockout_for(username=username, address=address) if username else None
        if lockout is None:
            try:
                return super().clean()
            except forms.ValidationError:
                # This failure may be the one that started a wait: say so at once.
                lockout = lockout_for(username=username, address=address)
                if lockout is None:
                    raise
        self.lockout = lockout
        raise forms.ValidationError(lockout.sentence, code="locked_out")
