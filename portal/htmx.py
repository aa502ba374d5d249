"""What htmx needs of every response, whichever view answered.

One URL serves the whole page and, to htmx, just a fragment of it (django-htmx's pattern), so:

- Every response says it varies by `HX-Request`. Without it the browser's cache keeps the
  fragment htmx fetched under the address htmx pushed, and Back to that address (the workload
  list after a filter, the launch form after a template was picked) showed the bare fragment.
- A request that needs a session and has none is sent to the login page and, after sign-in,
  back to the page the person was on. `login_required` answers a 302 that htmx's XMLHttpRequest
  would follow, swapping the whole login page into a card; and its `next` names the URL asked,
  which for htmx is a fragment and for a form is a POST-only address. So htmx gets `HX-Redirect`
  with `next` from `HX-Current-URL`, and a form post `next` from its Referer, the page of the form.
  What was typed into the form stays in the browser (static/portal/portal.js keeps it in the
  tab's sessionStorage when it is sent and fills it back in on that page after sign-in, without
  sending it): typed data is never stored on the server for a request nobody signed in for.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

# Tells static/portal/portal.js that the form just sent did not arrive, so what was typed is kept
# for the page to fill back in. Sent with the signed-out redirect and the CSRF failure.
KEEP_DRAFT_HEADER = "X-Portal-Keep-Draft"


def same_site_path(request: HttpRequest, url: str | None) -> str | None:
    """The path and query of `url` when it is an address on this site, else None: a header
    (HX-Current-URL, Referer) is whatever the client sent, and `next` must never lead elsewhere."""
    if not url or not url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                                       require_https=request.is_secure()):
        return None
    parts = urlsplit(url)
    path = parts.path or "/"
    if not path.startswith("/"):  # relative ("launch/"): not an address to come back to
        return None
    return f"{path}?{parts.query}" if parts.query else path


def page_of(request: HttpRequest) -> str:
    """The page a request was made from, to come back to: for htmx the page's address
    (HX-Current-URL), not the fragment's; for a form post its Referer, since the address posted
    to may answer only POST; otherwise the address asked for."""
    if request.headers.get("HX-Request") == "true":
        return (same_site_path(request, request.headers.get("HX-Current-URL"))
                or same_site_path(request, request.headers.get("Referer")) or "/")
    if request.method not in ("GET", "HEAD"):
        return same_site_path(request, request.headers.get("Referer")) or "/"
    return request.get_full_path()


def redirect_page(request: HttpRequest, url: str) -> HttpResponse:
    """After a change that succeeded: htmx loads `url` as a whole page (django-htmx's HX-Redirect,
    nothing to swap), a plain form post is redirected there. The one way every view answers so."""
    if request.headers.get("HX-Request") == "true":
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url)


def _is_login_redirect(response: HttpResponse) -> bool:
    """login_required's answer: to the login page, with the page to come back to."""
    if response.status_code not in (301, 302, 303) or "Location" not in response:
        return False
    location = urlsplit(response["Location"])
    return location.path == urlsplit(resolve_url(settings.LOGIN_URL)).path and "next" in parse_qs(location.query)


class HtmxPagesMiddleware:
    """Vary on HX-Request for every response, and the signed-out redirect that brings people back.

    Listed after WhiteNoise (static files never vary) and after django-htmx's middleware and
    the authentication middleware, whose `request.user` it reads."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Asked before the view: signing out also ends in a redirect to the login page, by someone
        # who was signed in when they asked.
        user = getattr(request, "user", None)
        signed_out = user is not None and not user.is_authenticated
        response = self.get_response(request)
        if signed_out and _is_login_redirect(response):
            response = self._back_after_sign_in(request, response)
        patch_vary_headers(response, ("HX-Request",))
        return response

    @staticmethod
    def _back_after_sign_in(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        htmx = request.headers.get("HX-Request") == "true"
        if not htmx and request.method in ("GET", "HEAD"):
            return response  # login_required's own `next` is already the page asked for
        login = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': page_of(request)})}"
        if htmx:
            answer: HttpResponse = HttpResponseClientRedirect(login)
        else:
            answer = HttpResponseRedirect(login)
        # A form post did not arrive; an htmx request, sent or not, leaves a page whose form may
        # hold something typed (the launch hint asks as the person types).
        answer[KEEP_DRAFT_HEADER] = "true"
        answer["Cache-Control"] = "no-store"
        return answer
