"""The Content-Security-Policy every response carries and the one way a view relaxes it; the
Permissions-Policy; the sessions' idle timeout and absolute lifetime; requests carrying text the database cannot keep
refused.

Django 5.2 has no CSP of its own (6.0 brings one), so this small middleware sets the header. The
policy comes from settings (CONTENT_SECURITY_POLICY): pages load scripts and styles only from
the portal itself, so a value that slips past escaping into a page cannot run as script.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY as AUTH_SESSION_KEY
from django.contrib.auth import user_logged_in
from django.contrib.auth.base_user import AbstractBaseUser
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.template import loader
from django.utils import timezone
from rest_framework import renderers

from portal.parsers import text_refusal

Directives = dict[str, list[str]]
_OVERRIDE_ATTRIBUTE = "portal_csp_extra"
_SEEN_KEY = "_portal_seen"
_SIGNED_IN_KEY = "_portal_signed_in_at"


def parse_policy(policy: str) -> Directives:
    directives: Directives = {}
    for part in policy.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


def format_policy(directives: Directives) -> str:
    return "; ".join(" ".join([name, *sources]) for name, sources in directives.items())


def policy_with(extra: Directives) -> str:
    """The site's policy with `extra`'s sources added to their directives (a new directive starts
    from default-src, as the browser would have fallen back to it)."""
    directives = parse_policy(settings.CONTENT_SECURITY_POLICY)
    for name, sources in extra.items():
        current = directives.get(name, list(directives.get("default-src", [])))
        directives[name] = current + [source for source in sources if source not in current]
    return format_policy(directives)


def csp_relax(response: HttpResponse, **extra: list[str]) -> None:
    """Adds sources to this one response's policy: `csp_relax(response, style_src=["'unsafe-inline'"])`."""
    setattr(response, _OVERRIDE_ATTRIBUTE, {name.replace("_", "-"): sources for name, sources in extra.items()})


def csp_relaxed(**extra: list[str]) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Adds sources for one view only, e.g. `csp_relaxed(style_src=["'unsafe-inline'"])`, for
    third-party pages (the API docs) that cannot be served under the strict policy."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            response = view(request, *args, **kwargs)
            csp_relax(response, **extra)
            return response

        return wrapped

    return decorate


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    """DRF's browsable API, whose templates carry style="" attributes: its pages allow inline
    styles; its scripts are all files, so script-src stays strict there too."""

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> Any:
        response = (renderer_context or {}).get("response")
        if response is not None:
            csp_relax(response, style_src=["'unsafe-inline'"])
        return super().render(data, accepted_media_type, renderer_context)


@receiver(user_logged_in)
def _stamp_sign_in(sender: Any, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any) -> None:
    """Notes when this session was signed in to, for its absolute lifetime. Only once: a silent
    single sign-on refresh logs the same user in again every few minutes, and must not start the
    lifetime over (signing in as someone else flushes the session, so it starts anew)."""
    session = getattr(request, "session", None)
    if session is not None:
        session.setdefault(_SIGNED_IN_KEY, int(timezone.now().timestamp()))


class SessionLifetimeMiddleware:
    """A signed-in session ends SESSION_ABSOLUTE_SECONDS after its sign-in, however busy it is
    (a page polling the bell never lets the idle end come), and SESSION_IDLE_SECONDS after its
    latest request. The absolute end is checked before the view, so the request goes on signed
    out (a page asks for a login, the API for credentials). The idle end is moved after the view,
    writing the session at most once per SESSION_REFRESH_SECONDS: pages poll every few seconds,
    and a write per poll (SESSION_SAVE_EVERY_REQUEST) would put one on the database each time."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        if session is not None and AUTH_SESSION_KEY in session:
            now = int(timezone.now().timestamp())
            signed_in_at = session.get(_SIGNED_IN_KEY)
            if signed_in_at is None:
                session[_SIGNED_IN_KEY] = now  # signed in before lifetimes were kept: its lifetime starts now
            elif now - int(signed_in_at) >= settings.SESSION_ABSOLUTE_SECONDS:
                session.flush()  # deleted from the store; AuthenticationMiddleware then finds nobody
        response = self.get_response(request)
        session = getattr(request, "session", None)
        # Only a signed-in session has an idle end to move; an anonymous one is never written for it.
        if session is None or session.is_empty() or AUTH_SESSION_KEY not in session:
            return response
        now = int(timezone.now().timestamp())  # the session store's clock, so its expiry agrees
        if now - int(session.get(_SEEN_KEY, 0)) >= settings.SESSION_REFRESH_SECONDS:
            session[_SEEN_KEY] = now  # modified, so SessionMiddleware saves it with a new expiry
        return response


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy: str = settings.CONTENT_SECURITY_POLICY
        if not policy:
            return response
        extra: Directives | None = getattr(response, _OVERRIDE_ATTRIBUTE, None)
        header = (
            "Content-Security-Policy-Report-Only" if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY
            else "Content-Security-Policy"
        )
        response.headers.setdefault(header, policy_with(extra) if extra else policy)
        return response


class PermissionsPolicyMiddleware:
    """Refuses every response's page the browser features it does not use (PERMISSIONS_POLICY)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.PERMISSIONS_POLICY:
            response.headers.setdefault("Permissions-Policy", settings.PERMISSIONS_POLICY)
        return response


class RefuseUnreadableTextMiddleware:
    """Refuses, with a 400 that names the field, a request whose path, query string, cookies or
    form hold text the database cannot keep (a NUL), before a view, a form's choices or the
    session's cookie can take it there (portal.parsers.text_refusal; the API's JSON and multipart
    bodies are held to it by their parsers). It runs before the session and the user are loaded,
    so its HTML page is drawn as to someone signed out, as the 500 page may be."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith("/api/")
        fields = [("path", request.path_info), *request.GET.lists(), *request.COOKIES.items()]
        try:
            # A multipart body is left to the API's parser, which says in JSON what is wrong with it.
            if request.content_type == "application/x-www-form-urlencoded" or (
                    request.content_type == "multipart/form-data" and not api):
                fields.extend(request.POST.lists())
        except MultiPartParserError as error:
            return self._refuse(api, "form", f"The form could not be read ({error}); send it again from its page.")
        refusal = text_refusal(fields)
        if refusal is None:
            return self.get_response(request)
        return self._refuse(api, *refusal)

    @staticmethod
    def _refuse(api: bool, field: str, message: str) -> HttpResponse:
        if api:
            return JsonResponse({"message": message, "errors": {field: [message]}}, status=400)
        return HttpResponse(loader.render_to_string("400.html", {"message": message}), status=400)


GATEWAY_GATE_PREFIX = "/auth/gateway"
GATEWAY_HOST_META = "PORTAL_GATEWAY_HOST"


class GatewayGateHostMiddleware:
    """A gateway's external authorization asks the gate (`/auth/gateway/…`) with the workload's
    Host. That host is not the portal's, and ALLOWED_HOSTS rightly refuses it (nothing else may be
    served under it, nor links be built with it), so the gate's requests keep it aside in
    `GATEWAY_HOST_META` for the gate alone and go on as the portal's own host (the one the
    gateway reaches it at, `PORTAL_INGRESS_AUTH_URL`'s)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.own_host = urllib.parse.urlsplit(settings.PORTAL_INGRESS_AUTH_URL).netloc

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path == GATEWAY_GATE_PREFIX or path.startswith(f"{GATEWAY_GATE_PREFIX}/"):
            request.META[GATEWAY_HOST_META] = request.META.get("HTTP_HOST", "")
            request.META["HTTP_HOST"] = self.own_host
            request.META.pop("HTTP_X_FORWARDED_HOST", None)
        return self.get_response(request)
