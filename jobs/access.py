"""Who reaches a workload's endpoint through its Ingress, and the notebook's token.

ingress-nginx asks the portal's gate (`/auth/workloads/<id>/`, the `auth-url` of every workload
Ingress) before each request and lets it through on 200; on 401 it sends a browser to
`auth-signin`, the portal's `/workloads/<id>/open/`. The portal's session cookie never reaches a
workload's host (a teammate's server would receive it), so the hand-over goes like this:

1. `/workloads/<id>/open/` (signed in to the portal) checks `jobs.open_workload` and redirects to
   the workload's host with a ticket in the query: signed, naming the user and the workload,
   good for `TICKET_SECONDS` and only once.
2. The gate sees the ticket in `X-Original-URL`, spends it (its nonce is recorded in the
   database, `SpentTicket`, not the cache: Redis away must not lock people out of their
   notebooks), answers 200 and sets the access
   cookie on the workload's host (ingress-nginx passes the gate's `Set-Cookie` on): host-only,
   HttpOnly, signed for that user and that workload only, so the server behind it, which sees the
   cookie, cannot use it anywhere else.
3. Later requests carry the cookie; each is checked again against the user (active, password
   unchanged) and `jobs.open_workload`, so a member removed from the team or a deactivated
   account is out at the next request.

A Gateway API gateway asks the gate through its external authorization (the HTTPRoute's
`ExternalAuth` filter, or the gateway's own): `/auth/gateway` followed by the request's path, with
its method and Host, which names the workload. It cannot send a browser elsewhere on 401 nor pass
the gate's cookie to the browser on 200, so there the gate answers in redirects, which a gateway
returns to the client as they are: a browser that is not signed in goes to
`/workloads/<id>/open/`, and a spent ticket comes back to the same path without it, with the
access cookie.

Programs send an endpoint key of that server (`Authorization: Bearer gpk_…`, jobs/endpoint_keys.py),
which opens that server only and never reaches it. Scripts may also send a portal API token
(`Authorization: Token gpp_…`): a read-only token may only make
GET, HEAD and OPTIONS requests. The gate hands the workload the caller's Authorization header
with a portal token taken out (`auth-response-headers`), so a server never learns its callers'
tokens, and `X-Portal-User` with the caller's username.

Every refusal of a caller who proved who they are is 403, whether the workload is another
team's, a teammate's notebook or does not exist: the gate tells nobody what exists elsewhere.

A notebook's token is derived from `PORTAL_NOTEBOOK_TOKEN_KEY` and the workload (an HMAC), put in
the workload's Kubernetes Secret for its pod, and only its SHA-256 is stored.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import urllib.parse
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core import signing
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac
from rest_framework import exceptions, permissions
from rest_framework.request import Request

from jobs import endpoint_keys
from jobs.models import EndpointKey, SpentTicket, Workload
from portal.models import ApiToken, User
from portal.tokens import TOKEN_PREFIX, TokenAuthentication

TICKET_PARAM = "gpu-portal-ticket"
ACCESS_COOKIE = "gpu-portal-access"
TICKET_SECONDS = 60
TICKET_SALT = "gpu-portal.workload-ticket"
ACCESS_SALT = "gpu-portal.workload-access"


def notebook_token(workload: Workload) -> str:
    """The notebook's login token: the same every time it is asked for, never stored."""
    value = f"{workload.pk}:{workload.created_at.isoformat()}"
    return salted_hmac("gpu-portal.notebook-token", value, secret=settings.PORTAL_NOTEBOOK_TOKEN_KEY,
                       algorithm="sha256").hexdigest()


def notebook_token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def ticket_issue(*, user: User, workload: Workload) -> str:
    """A one-time pass from the portal's session to the workload's host. The caller has checked
    `jobs.open_workload`; the gate checks it again when the ticket is spent."""
    return signing.dumps({"w": workload.pk, "u": user.pk, "n": secrets.token_urlsafe(16)}, salt=TICKET_SALT)


def _ticket_spend(*, workload_id: int, original_url: str) -> int | None:
    """The user a valid, unspent ticket in the original URL names; it cannot be spent twice."""
    values = urllib.parse.parse_qs(urllib.parse.urlsplit(original_url).query).get(TICKET_PARAM)
    if not values:
        return None
    try:
        ticket = signing.loads(values[0], salt=TICKET_SALT, max_age=TICKET_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(ticket, dict) or ticket.get("w") != workload_id or not isinstance(ticket.get("u"), int):
        return None
    try:
        with transaction.atomic():
            SpentTicket.objects.create(nonce=str(ticket.get("n"))[:64])
    except IntegrityError:
        return None  # spent already
    SpentTicket.objects.filter(spent_at__lt=timezone.now() - dt.timedelta(seconds=TICKET_SECONDS * 2)).delete()
    return int(ticket["u"])


def access_cookie_value(*, user: User, workload_id: int) -> str:
    return signing.dumps({"w": workload_id, "u": user.pk, "h": user.get_session_auth_hash()}, salt=ACCESS_SALT)


def _cookie_user(*, workload_id: int, value: str) -> User | None:
    try:
        access = signing.loads(value, salt=ACCESS_SALT, max_age=settings.SESSION_IDLE_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(access, dict) or access.get("w") != workload_id or not isinstance(access.get("u"), int):
        return None
    user = User.objects.filter(pk=access["u"]).first()
    # A changed password (or a user gone) ends every cookie made before, as it ends sessions.
    if user is None or not constant_time_compare(str(access.get("h", "")), user.get_session_auth_hash()):
        return None
    return user


@dataclass(frozen=True)
class GateAnswer:
    status: int  # 200 lets the request through; 401 asks who it is; 403 refuses who it is
    username: str = ""
    authorization: str = ""  # what the workload receives as Authorization
    access_cookie: str = ""  # set on the workload's host after a ticket was spent


def _portal_token(header: str) -> bool:
    parts = header.split()
    return len(parts) == 2 and parts[0].lower() in TokenAuthentication.keywords and parts[1].startswith(TOKEN_PREFIX)


def _endpoint_key(header: str) -> str:
    """The endpoint key a program sent (`Bearer gpk_…`), or ""."""
    parts = header.split()
    return parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" and parts[1].startswith(EndpointKey.PREFIX) else ""


def gate_check(*, workload_id: int, request: HttpRequest, original_url: str, method: str) -> GateAnswer:
    """May this request reach workload `workload_id`? `original_url` (its path and query) and
    `method` are the request's at the gateway: ingress-nginx sends them as X-Original-URL and
    X-Original-Method, a Gateway API gateway as the gate's own path and method."""
    header = request.headers.get("Authorization", "")
    method = method.upper()
    user: User | AnonymousUser | None = None
    cookie = ""
    if key_secret := _endpoint_key(header):
        key = endpoint_keys.key_admits(workload_id=workload_id, secret=key_secret)
        if key is None:
            return GateAnswer(401)  # unknown, revoked, another server's, or its server has ended
        return GateAnswer(200, username=f"key:{key.name}")  # the server never sees the key
    if _portal_token(header):
        try:
            authenticated = TokenAuthentication().authenticate(Request(request))
        except exceptions.PermissionDenied:
            return GateAnswer(403)  # a read-only token, and a gateway asked with the request's own method: a change
        except exceptions.APIException:
            return GateAnswer(401)  # unknown, revoked or expired
        if authenticated is None:
            return GateAnswer(401)
        user, token = authenticated
        if token.scope == ApiToken.Scope.READ and method not in permissions.SAFE_METHODS:
            return GateAnswer(403)
        header = ""  # the workload never sees its callers' portal tokens
    else:
        ticket_user = _ticket_spend(workload_id=workload_id, original_url=original_url)
        if ticket_user is not None:
            user = User.objects.filter(pk=ticket_user).first()
            if user is not None:
                cookie = access_cookie_value(user=user, workload_id=workload_id)
        if user is None and request.COOKIES.get(ACCESS_COOKIE):
            user = _cookie_user(workload_id=workload_id, value=request.COOKIES[ACCESS_COOKIE])
        if user is None and request.user.is_authenticated:
            user = request.user  # the portal's own session, where a site shares its cookie domain
    if user is None or not user.is_authenticated or not user.is_active:
        return GateAnswer(401)
    workload = Workload.objects.select_related("template_version__template").filter(pk=workload_id).first()
    if workload is None or not user.has_perm("jobs.open_workload", workload):
        return GateAnswer(403)
    return GateAnswer(200, username=user.get_username(), authorization=header, access_cookie=cookie)


def _query_without_ticket(parts: urllib.parse.SplitResult) -> list[tuple[str, str]]:
    return [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != TICKET_PARAM]


def without_ticket(path: str) -> str:
    """The path a browser came with, its ticket taken out: where the gate sends it back to once
    the ticket is spent and the access cookie set."""
    parts = urllib.parse.urlsplit(path)
    return urllib.parse.urlunsplit(("", "", parts.path or "/", urllib.parse.urlencode(_query_without_ticket(parts)), ""))


def safe_return_path(value: Any) -> str:
    """The path ingress-nginx asked to come back to, or / when it is not a plain path on the host."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//") or any(
        c in value for c in "\\\r\n"
    ):
        return "/"
    return value


def with_ticket(path: str, ticket: str) -> str:
    parts = urllib.parse.urlsplit(path)
    query = [*_query_without_ticket(parts), (TICKET_PARAM, ticket)]
    return urllib.parse.urlunsplit(("", "", parts.path or "/", urllib.parse.urlencode(query), parts.fragment))
