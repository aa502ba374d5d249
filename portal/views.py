"""Pages every app shares: sign-in and sign-out, health, metrics, API tokens, notifications, the
CSRF failure page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template import loader
from django.templatetags.static import static
from django.views import defaults
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from portal import health, observability
from portal import notifications as notification_services
from portal import tokens as token_services
from portal.adapters import HtmxHttpRequest, add_refusal, page, whole_number
from portal.errors import DomainError
from portal.forms import ApiTokenForm
from portal.htmx import KEEP_DRAFT_HEADER, same_site_path
from portal.models import ApiToken, Notification
from portal.signin import SignInForm


class SignInView(auth_views.LoginView):
    """Django's login, with the lockout's sentence (SignInForm). The site's root as `next` names
    no page in particular (every signed-out visit to the portal's address is sent here with it),
    so it gives way to the person's own start page (LOGIN_REDIRECT_URL: finance whose only role
    is finance starts on the finance overview)."""

    authentication_form = SignInForm

    def get_success_url(self) -> str:
        url = self.get_redirect_url()
        return url if url not in ("", "/") else self.get_default_redirect_url()


class SignOutView(auth_views.LogoutView):
    """Django's logout, then the login page saying so: a page that merely looks signed out could
    be a session that ended on its own."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        messages.info(request, "You are signed out.")
        return response


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form sent with a CSRF token the portal no longer accepts (the page was open from before
    the last sign-in, perhaps in another tab; or the browser dropped the cookie). Nothing was
    done: the page says so in the site's layout and leads back to the form (its Referer, when
    on this site). htmx swaps no 403, so an htmx form reloads its page instead, which brings a
    fresh token. Either way portal.js keeps what was typed and fills it back in on that page."""
    if request.headers.get("HX-Request") == "true":
        response = HttpResponse(status=403, headers={"HX-Refresh": "true"})
    else:
        back = same_site_path(request, request.headers.get("Referer"))
        response = render(request, "403_csrf.html", {"back": back}, status=403)
    response[KEEP_DRAFT_HEADER] = "true"
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """The branded 500 page, with the navigation when it can be drawn. Drawing it may itself fail
    (the database the session needs may be what broke), so then it is drawn without the request."""
    template = loader.get_template("500.html")
    try:
        body = template.render({}, request)
    except Exception:  # noqa: BLE001 - whatever broke the page may break this too; the plain page still answers
        body = template.render({})
    return HttpResponse(body, status=500)
def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """A URL nothing serves (`/api/workloads/abc/`): under /api/ the API's JSON error, so a script
    never has to read an HTML page; elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"message": "Not found, or not visible to you.", "errors": {}}, status=404)
    return defaults.page_not_found(request, exception or Http404())


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Pages name their icon (favicon.svg); what does not, such as the API's browsable pages or a
    browser's own guess, asks for /favicon.ico."""
    return redirect(static("portal/favicon.svg"), permanent=True)


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the web process answers. Cheap, and it names nothing inside the site."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database, the broker, the worker, beat and the watch sync are all alive."""
    problems = health.readiness_problems()
    if problems:
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok", "problems": []})


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics, for the bearer of METRICS_TOKEN; route names and counts say how the site is used."""
    refusal = observability.metrics_refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)


@login_required
def api_tokens(request: HtmxHttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            token, secret = token_services.api_token_create(
                user=request.user, name=form.cleaned_data["name"], expires_in_days=form.cleaned_data["expires_in_days"],
                scope=form.cleaned_data["scope"],
            )
        except DomainError as error:
            add_refusal(form, error)
        else:
            form = ApiTokenForm()
            messages.success(request, f"Token “{token.name}” created. Copy it now: it is not shown again.")
    tokens = page(ApiToken.objects.filter(user=request.user), request.GET.get("page"))
    return render(request, "portal/api_tokens.html", {"form": form, "tokens": tokens, "secret": secret})


@login_required
@require_POST
def api_token_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
    try:
        token_services.api_token_revoke(token=token, actor=request.user)
    except DomainError as error:
        messages.error(request, error.message)
    if request.htmx:
        return render(request, "portal/api_tokens.html#token-row", {"token": token})
    return redirect("api-tokens")


@login_required
def notification_list(request: HtmxHttpRequest) -> HttpResponse:
    notes = page(Notification.objects.for_user(request.user), request.GET.get("page"))
    template = "portal/notifications.html#notification-list" if request.htmx else "portal/notifications.html"
    return render(request, template, {"notes": notes})


@require_GET
def notification_bell(request: HtmxHttpRequest) -> HttpResponse:
    """The bell and its unread count alone, for its own poll. Signed out (the session ended), it
    answers 286, which tells htmx to stop polling, instead of a login page swapped into the header."""
    if not request.user.is_authenticated:
        return HttpResponse(status=286)
    response = render(request, "portal/_bell.html")
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def notifications_read(request: HtmxHttpRequest) -> HttpResponse:
    pk = request.POST.get("id") or None
    notification_id = whole_number(pk)
    if pk is not None and notification_id is None:  # without an id all are marked read: not what a bad id asked for
        return HttpResponseBadRequest(f"“{pk}” is not a notification id.")
    notification_services.notifications_mark_read(user=request.user, notification_id=notification_id)
    if request.htmx:
        return HttpResponseClientRefresh()
    return redirect("notifications")


@login_required
def notification_open(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    note = get_object_or_404(Notification.objects.for_user(request.user), pk=pk)
    notification_services.notifications_mark_read(user=request.user, notification_id=note.pk)
    return redirect(note.url or "notifications")
