"""The workload pages: templates, the launch form with its live quota hint, the workload list
and one workload's page. Each view parses, calls one service or selector, and renders.

Workloads are always looked up through `for_user` querysets, so another team's is 404. For
htmx requests a view answers with just the fragment it changed.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobs import (
    access,
    endpoint_keys,
    notebooks,
    notifications,
    person_limits,
    pricing,
    reclaim,
    selectors,
    services,
    telemetry,
    try_it,
    xid,
)
from jobs.filters import WorkloadFilter
from jobs.forms import LaunchForm
from jobs.models import EndpointKey, NotifyBy, Workload, WorkloadEvent, WorkloadTemplate
from jobs.rules import LOGS_REFUSAL
from jobs.template_forms import authorable_teams
from portal.adapters import HtmxHttpRequest, page, require_perm, signed_in_user, whole_number
from portal.errors import DomainError
from portal.htmx import redirect_page
from portal.kube import KubeError
from portal.security import GATEWAY_GATE_PREFIX, GATEWAY_HOST_META
from tenants import cluster_selectors
from tenants.models import Flavor, Team

WAITING_PHASES = (Workload.Phase.QUEUED, Workload.Phase.PREEMPTED)
LOG_LINES = 50


def _visible_workload(request: HtmxHttpRequest, pk: int) -> Workload:
    workloads = Workload.objects.for_user(request.user).select_related(
        "team", "owner", "flavor", "template_version__template", "relaunch_of")
    return get_object_or_404(workloads, pk=pk)


def _visible_team(request: HtmxHttpRequest, slug: str) -> Team | None:
    return get_object_or_404(Team.objects.for_user(request.user), slug=slug) if slug else None


def _visible_template(templates: list[WorkloadTemplate], reference: str) -> WorkloadTemplate | None:
    """The template an id (or an old link's slug) names among those the user may launch; a slug
    several of them share names none, so the form asks. One the user cannot see is 404."""
    if not reference:
        return None
    named = selectors.templates_named_among(templates=templates, reference=reference)
    if not named:
        raise Http404("No such template.")
    return named[0] if len(named) == 1 else None


# --- Templates --------------------------------------------------------------------------------


@login_required
@require_GET
def template_list(request: HtmxHttpRequest) -> HttpResponse:
    templates = page(selectors.templates_for_user(user=request.user), request.GET.get("page"))
    rows = [(template, template.versions.all()[0]) for template in templates]
    template = "jobs/template_list.html#template-rows" if request.htmx else "jobs/template_list.html"
    may_author = request.user.has_perm("jobs.create_global_template") or authorable_teams(request.user).exists()
    return render(request, template, {"templates": templates, "rows": rows, "may_author": may_author})


# --- Launch -----------------------------------------------------------------------------------


def _launch_form(request: HtmxHttpRequest, data: QueryDict | None, source: QueryDict) -> LaunchForm:
    """The form for the team and template named in the request; either, if not visible, is 404."""
    templates = list(selectors.templates_for_user(user=request.user))
    team = _visible_team(request, source.get("team", "").strip())
    template = _visible_template(templates, source.get("template", "").strip())
    if template is None and len(templates) == 1:
        template = templates[0]
    if data is not None and template is not None:
        data = data.copy()
        data["template"] = str(template.pk)  # the form names templates by id; a unique slug meant this one
    return LaunchForm(data, user=request.user, templates=templates, team=team, template=template,
                      initial_name=source.get("name", "").strip())


@login_required
@require_http_methods(["GET", "POST"])
def workload_launch(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = _launch_form(request, request.POST, request.POST)
        if form.is_valid():
            try:
                workload = services.workload_launch(user=request.user, request=form.launch_request())
            except DomainError as error:
                form.add_domain_error(error)
            else:
                messages.success(request, f"Launched {workload.name} (#{workload.pk}) for {workload.team.slug}.")
                return redirect("jobs:workload-detail", workload.pk)
    else:
        form = _launch_form(request, None, request.GET)
        chosen, asked = form.chosen_template, request.GET.get("template", "").strip()
        if chosen is not None and asked and asked != str(chosen.pk):
            # An old link named the template by slug: answer with the address that names it for good.
            query = request.GET.copy()
            query["template"] = str(chosen.pk)
            return redirect(f"{reverse('jobs:workload-launch')}?{query.urlencode()}")
    template = "jobs/launch.html#launch-form" if request.htmx else "jobs/launch.html"
    return render(request, template, {"form": form, "runtime_missing": _runtime_classes_missing(form.allowed_flavors)})


def _runtime_classes_missing(flavors: list[Flavor]) -> dict[int, str]:
    """The flavors whose RuntimeClass the cluster lacks, for the form's list: read now, as the
    launch reads it (no read when no flavor names one; no mark when the cluster does not answer)."""
    try:
        return cluster_selectors.missing_runtime_classes(flavors=flavors)
    except KubeError:
        return {}


@login_required
@require_GET
def launch_hint(request: HtmxHttpRequest) -> HttpResponse:
    """Where the launch stands against the team's quota, and the service's refusal if any."""
    form = _launch_form(request, request.GET, request.GET)
    context: dict[str, Any] = {"hint": None, "message": None, "refusal": None}
    if form.chosen_team is None or form.chosen_template is None:
        context["message"] = "Choose a team and a template to see where your quota stands."
    elif not form.is_valid():
        context["refusal"] = next(iter(e for errors in form.errors.values() for e in errors))
    else:
        launch = form.launch_request()
        version = launch.version or launch.template.current
        units = launch.units if launch.units is not None else version.default_units
        # Per pod, times the pods: a refused distributed job's hint still counts every worker.
        pods = services.pods_asked(version=version, parameters=launch.parameters)
        try:
            _, _, resources = services.check_launch(user=request.user, request=launch)
        except DomainError as error:
            context["refusal"] = error.message
            if not 1 <= units <= version.max_units:
                # A count the template refuses has no quota or price to weigh (40 digits once
                # overflowed the price's arithmetic): the refusal is the whole answer.
                return render(request, "jobs/launch.html#launch-hint", context)
            units *= pods
        else:
            units, pods = resources["units"] * resources["workers"], resources["workers"]
            context["person_wait"] = person_limits.must_wait(
                team=launch.team, owner=request.user, flavor=launch.flavor, units=resources["units"],
                workers=resources["workers"], would=True)
        context["pods"] = pods
        hint = selectors.launch_hint_among(team=launch.team, flavors=launch.flavors, units=units)
        borrow = max(units - hint.free, 0) if hint.usage else 0
        context.update(hint=hint, team=launch.team, borrow_units=min(borrow, units), several=len(launch.flavors) > 1)
    return render(request, "jobs/launch.html#launch-hint", context)


# --- Workloads --------------------------------------------------------------------------------


@login_required
@require_GET
def workload_list(request: HtmxHttpRequest) -> HttpResponse:
    user = request.user
    teams = list(Team.objects.for_user(user).only("slug", "name").order_by("name"))
    templates = list(WorkloadTemplate.objects.for_user(user).select_related("owner_team").only(
        "slug", "name", "owner_team__slug").order_by("name", "pk"))
    filters = WorkloadFilter(request.GET, queryset=selectors.workloads_for_user(user=user), request=request)
    workloads = page(filters.qs, request.GET.get("page"))  # a value it does not understand is left out, not refused
    chosen = filters.form.cleaned_data
    team = next((t for t in teams if t.slug == chosen.get("team")), None)
    named = selectors.templates_named_among(templates=templates, reference=chosen.get("template") or "")
    template = named[0] if len(named) == 1 else None
    phase, mine = chosen.get("phase") or "", bool(chosen.get("mine"))
    context = {
        "workloads": workloads, "any_active": any(w.is_active for w in workloads),
        "teams": teams, "templates": templates, "phases": Workload.Phase.choices,
        "team": team, "template": template, "phase": phase, "mine": mine,
        "filtered": any(chosen.values()),
    }
    used = pricing.used_so_far(workload_ids=[w.pk for w in workloads])
    use = telemetry.gpu_use(workloads=list(workloads))
    context["rows"] = [(w, used.get(w.pk), use.get(w.pk)) for w in workloads]
    name = "jobs/workload_list.html#workload-rows" if request.htmx else "jobs/workload_list.html"
    return render(request, name, context)


TEAM_GPU_USE_ROWS = 50


@login_required
@require_GET
def team_gpu_use(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The team page's running workloads with their GPU use: one metrics query for all of them
    (jobs.telemetry.gpu_use), never one per workload; another team's is 404."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    running = list(selectors.workloads_for_user(user=request.user)
                   .filter(team=team, phase=Workload.Phase.RUNNING).exclude(flavor__sharing_mode=Flavor.SharingMode.CPU)
                   .order_by("-pk")[:TEAM_GPU_USE_ROWS + 1])
    shown = running[:TEAM_GPU_USE_ROWS]
    use = telemetry.gpu_use(workloads=shown)
    context = {"team": team, "rows": [(w, use.get(w.pk)) for w in shown], "more": len(running) > TEAM_GPU_USE_ROWS}
    name = "jobs/team_gpu_use.html#team-gpu-use" if request.htmx else "jobs/team_gpu_use.html"
    return render(request, name, context)


MY_WORKLOADS_ROWS = 10


@login_required
@require_GET
def my_workloads(request: HtmxHttpRequest) -> HttpResponse:
    """The dashboard's card: the user's own running and queued workloads, newest first, with Open
    for a notebook or server they may open from outside the cluster (the gate's own rule)."""
    mine = list(selectors.workloads_for_user(user=request.user)
                .filter(owner=request.user, phase__in=Workload.ACTIVE_PHASES).order_by("-pk")[:MY_WORKLOADS_ROWS + 1])
    shown = mine[:MY_WORKLOADS_ROWS]
    rows = [(w, w.phase == Workload.Phase.RUNNING and bool(services.ingress_host(w))
             and request.user.has_perm("jobs.open_workload", w)) for w in shown]
    context = {"rows": rows, "more": len(mine) > MY_WORKLOADS_ROWS,
               "launches": request.user.has_perm("jobs.open_launch_form")}
    name = "jobs/my_workloads.html#my-workloads" if request.htmx else "jobs/my_workloads.html"
    return render(request, name, context)


@login_required
@require_POST
def my_notebook(request: HtmxHttpRequest) -> HttpResponse:
    """The dashboard's "My notebook": opens the newest of the person's notebooks still up (its
    page while it comes up), starts one where there is nothing to choose, or goes to the launch
    form where there is."""
    user = signed_in_user(request)
    require_perm(user, "jobs.open_launch_form", refusal="Only people who launch work have notebooks.")
    outcome = notebooks.open_or_start(user=user)
    if outcome.refusal:
        messages.error(request, f"Your notebook was not started: {outcome.refusal}")
    elif outcome.workload is None:
        messages.info(request, "Choose the team, template and flavor of your notebook.")
    if outcome.workload is None:
        return redirect(outcome.launch_url)
    workload = outcome.workload
    if outcome.started:
        messages.success(request, f"Started your notebook {workload.name} (#{workload.pk}); it opens from here once it runs.")
    elif (workload.phase == Workload.Phase.RUNNING and services.ingress_host(workload)
          and user.has_perm("jobs.open_workload", workload)):
        return redirect("jobs:workload-open", workload.pk)
    return redirect("jobs:workload-detail", workload.pk)


def _live_context(
    workload: Workload, *, picture: selectors.LivePicture | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "workload": workload,
        "transitions": list(workload.transitions.all()),
        "intervals": list(workload.intervals.prefetch_related("switches")),
        "waiting": selectors.why_waiting(workload=workload) if workload.phase in WAITING_PHASES else None,
        "picture": picture,
        "action_error": error,
        "idle": reclaim.idle_picture(workload=workload),
        # In the polled fragment, so what it cost so far counts up while it runs.
        "used": pricing.used_so_far(workload_ids=[workload.pk]).get(workload.pk),
    }


def _detail_context(request: HtmxHttpRequest, workload: Workload, *,
                    picture: selectors.LivePicture | None = None) -> dict[str, Any]:
    version = workload.template_version
    declared = {spec["name"]: spec for spec in version.parameters}
    serves = workload.kind_facts.serves_http
    parameters = ([(name, value, declared.get(name, {})) for name, value in sorted(workload.parameters.items())]
                  if request.user.has_perm("jobs.read_workload_parameters", workload) else None)
    live = _live_context(workload, picture=picture)
    return {
        **live,
        "version": version,
        "parameters": parameters,
        "may_read_logs": request.user.has_perm("jobs.read_workload_logs", workload),
        "borrowed": selectors.borrowed_history(intervals=live["intervals"]),
        "gpus": workload.total_units * workload.flavor.fraction,
        **_endpoint_facts(workload),
        "port_forward": services.port_forward_command(workload) if serves else "",
        "xids": xid.xid_rows(workload=workload),
        "endpoint_keys": _endpoint_keys(request, workload),
        "may_try": (bool(workload.kind_facts.try_it) and request.user.has_perm("jobs.open_workload", workload)),
        "try_max_tokens": try_it.MAX_TOKENS,
    }


def _endpoint_facts(workload: Workload) -> dict[str, Any]:
    """Where a served workload answers, as its page and the cards answered alone say it."""
    return {"endpoint": services.endpoint(workload) if workload.kind_facts.serves_http else "",
            "reachable": bool(services.ingress_host(workload)),
            "simulated_cluster": settings.PORTAL_CLUSTER == "simulated"}


def _endpoint_keys(request: HtmxHttpRequest, workload: Workload) -> list[EndpointKey] | None:
    """The keys of a server its team serves, for who may manage them; None: the page shows none."""
    if not request.user.has_perm("jobs.manage_endpoint_keys", workload):
        return None
    return list(workload.endpoint_keys.select_related("created_by"))


@login_required
@require_GET
def workload_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    return render(request, "jobs/workload_detail.html", _detail_context(request, workload))


@login_required
@require_GET
def workload_live(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Phase, timeline and why it waits from the database; the pods and events the cluster shows now."""
    workload = _visible_workload(request, pk)
    picture = selectors.live_picture(workload=workload)
    if request.htmx:
        return render(request, "jobs/workload_detail.html#workload-live", _live_context(workload, picture=picture))
    return render(request, "jobs/workload_detail.html", _detail_context(request, workload, picture=picture))


@login_required
@require_GET
def workload_telemetry(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The GPU charts and verdict; the page loads them, and reloads them every 30 s while it runs."""
    workload = _visible_workload(request, pk)
    context = {"workload": workload, "telemetry": telemetry.workload_telemetry(workload=workload)}
    if request.htmx:
        return render(request, "jobs/workload_detail.html#workload-telemetry", context)
    return render(request, "jobs/workload_detail.html", {**_detail_context(request, workload), **context})


@login_required
@require_GET
def workload_logs(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The logs panel, opened: a pod's last lines (the newest pod unless `pod` names another),
    read only on this request, never by the page's poll. With `follow` and while the workload
    runs, the panel asks again by itself every few seconds."""
    workload = _visible_workload(request, pk)
    # Someone who sees the workload but not its logs (finance) is told so: 403, not 404.
    require_perm(request.user, "jobs.read_workload_logs", workload, refusal=LOGS_REFUSAL)
    logs = selectors.workload_logs(workload=workload, tail_lines=LOG_LINES, pod=request.GET.get("pod", "").strip())
    context = {"workload": workload, "logs": logs, "follow": bool(request.GET.get("follow")) and workload.is_active}
    if request.htmx:
        return render(request, "jobs/workload_detail.html#workload-logs", context)
    return render(request, "jobs/workload_detail.html", {**_detail_context(request, workload), **context})


@login_required
@require_GET
def workload_logs_download(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A pod's whole log as a file, up to LOG_DOWNLOAD_BYTES (the API server cuts it there)."""
    workload = _visible_workload(request, pk)
    # Someone who sees the workload but not its logs (finance) is told so: 403, not 404.
    require_perm(request.user, "jobs.read_workload_logs", workload, refusal=LOGS_REFUSAL)
    logs = selectors.workload_logs(workload=workload, tail_lines=None, pod=request.GET.get("pod", "").strip(),
                                   limit_bytes=selectors.LOG_DOWNLOAD_BYTES)
    if logs.unreachable:
        return HttpResponse(logs.unreachable, status=404 if logs.no_such_pod else 502, content_type="text/plain; charset=utf-8")
    response = HttpResponse(logs.text + ("\n" if logs.lines else ""), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{logs.pod or workload.k8s_name}.log"'
    response["Cache-Control"] = "no-store"
    return response


def _after_action(request: HtmxHttpRequest, pk: int, *, error: str | None, done: str | None = None) -> HttpResponse:
    """The workload's live fragment for htmx (with the refusal, if any), else back to its page."""
    workload = _visible_workload(request, pk)
    if request.htmx:
        return render(request, "jobs/workload_detail.html#workload-live", _live_context(workload, error=error))
    if error:
        messages.error(request, error)
    elif done:
        messages.success(request, done)
    return redirect("jobs:workload-detail", workload.pk)


@login_required
@require_POST
def workload_stop(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    try:
        services.workload_stop(user=request.user, workload=workload)
    except DomainError as refusal:
        return _after_action(request, pk, error=refusal.message)
    return _after_action(request, pk, error=None, done=f"Stopped {workload.name}.")


@login_required
@require_POST
def workload_keep_running(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    try:
        reclaim.workload_keep_running(user=request.user, workload=workload)
    except DomainError as refusal:
        return _after_action(request, pk, error=refusal.message)
    return _after_action(request, pk, error=None, done=f"{workload.name} is kept running.")


@login_required
@require_POST
def workload_scale(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    raw = request.POST.get("replicas", "")
    replicas = whole_number(raw)
    try:
        if replicas is None:
            raise DomainError(f"Replicas must be a whole number, not “{raw}”.", field="replicas")
        services.workload_scale(user=request.user, workload=workload, replicas=replicas)
    except DomainError as refusal:
        return _after_action(request, pk, error=refusal.message)
    return _after_action(request, pk, error=None, done=f"{workload.name} now has {replicas} replicas.")


@login_required
@require_POST
def workload_relaunch(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    try:
        relaunched = services.workload_relaunch(user=request.user, workload=workload)
    except DomainError as refusal:
        if request.htmx:
            return render(request, "jobs/workload_detail.html#workload-live", _live_context(workload, error=refusal.message))
        messages.error(request, refusal.message)
        return redirect("jobs:workload-detail", workload.pk)
    messages.success(request, f"Relaunched {workload.name} as #{relaunched.pk}.")
    return redirect_page(request, reverse("jobs:workload-detail", args=[relaunched.pk]))


# --- Reaching a workload through its Ingress (jobs/access.py) ----------------------------------


@require_GET
def workload_gate(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """ingress-nginx's `auth-url`: 200, 401 or 403, at once, never a redirect."""
    answer = access.gate_check(workload_id=pk, request=request, original_url=request.headers.get("X-Original-URL", ""),
                               method=request.headers.get("X-Original-Method", "GET"))
    response = HttpResponse(status=answer.status, content_type="text/plain")
    response["Cache-Control"] = "no-store"
    if answer.status == 200:
        response["X-Portal-User"] = answer.username
        if answer.authorization:
            response["Authorization"] = answer.authorization
        if answer.access_cookie:
            _set_access_cookie(response, answer.access_cookie)
    return response


def _set_access_cookie(response: HttpResponse, value: str) -> None:
    response.set_cookie(access.ACCESS_COOKIE, value, max_age=settings.SESSION_IDLE_SECONDS,
                        secure=services.ingress_tls(), httponly=True, samesite="Lax")


@csrf_exempt  # the gateway asks with the request's own method; the gate changes nothing a form could
def workload_gateway_gate(request: HtmxHttpRequest) -> HttpResponse:
    """A Gateway API gateway's external authorization (HTTP): the request's method, its path
    after `/auth/gateway`, and its Host naming the workload. 200 lets it through with
    X-Portal-User and Authorization (always sent, empty where a portal token or endpoint key was
    taken out, so the gateway's copy replaces the caller's). Anything else is the client's answer:
    a browser not signed in is sent to sign in, a spent ticket back to its path with the access
    cookie set (a gateway passes no cookie on a 200), 401 and 403 otherwise."""
    original = request.get_full_path()[len(GATEWAY_GATE_PREFIX):] or "/"
    workload_id = services.endpoint_workload(request.META.get(GATEWAY_HOST_META, ""))
    if workload_id is None:
        answer = access.GateAnswer(403)  # not a workload's host: the gate says nothing of what exists
    else:
        answer = access.gate_check(workload_id=workload_id, request=request, original_url=original,
                                   method=request.method or "GET")
    if answer.status == 200 and answer.access_cookie:
        response: HttpResponse = HttpResponseRedirect(access.without_ticket(original))
        _set_access_cookie(response, answer.access_cookie)
    elif answer.status == 200:
        response = HttpResponse(status=200, content_type="text/plain")
        response["X-Portal-User"] = answer.username
        response["Authorization"] = answer.authorization
    elif answer.status == 401 and workload_id is not None and _browser_navigation(request):
        query = urllib.parse.urlencode({"rd": access.without_ticket(original)})
        response = HttpResponseRedirect(f"{settings.SITE_URL}{reverse('jobs:workload-open', args=[workload_id])}?{query}")
    else:
        response = HttpResponse(status=answer.status, content_type="text/plain")
    response["Cache-Control"] = "no-store"
    return response


def _browser_navigation(request: HttpRequest) -> bool:
    """A person's browser opening a page (sent to sign in), not a program (answered 401)."""
    return (request.method in ("GET", "HEAD") and not request.headers.get("Authorization")
            and "text/html" in request.headers.get("Accept", ""))


@login_required
@require_GET
def workload_open(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """ingress-nginx's `auth-signin`: from the portal's session to the workload's host, with a
    one-time ticket; someone who may not use the workload is told so here, not sent round again."""
    workload = _visible_workload(request, pk)
    host = services.ingress_host(workload)
    if not host:
        raise Http404("This workload is not reachable from outside the cluster.")
    require_perm(request.user, "jobs.open_workload", workload,
                 refusal="Only its owner may open a notebook; an inference server serves its team's members.")
    ticket = access.ticket_issue(user=request.user, workload=workload)
    path = access.with_ticket(access.safe_return_path(request.GET.get("rd", "/")), ticket)
    response = HttpResponseRedirect(f"{'https' if services.ingress_tls() else 'http'}://{host}{path}")
    response["Cache-Control"] = "no-store"
    return response


def _keys_answer(request: HtmxHttpRequest, workload: Workload, **extra: Any) -> HttpResponse:
    """The keys' card for htmx (only what it shows: no cluster read), else the whole page."""
    if request.htmx:
        context = {"workload": workload, **_endpoint_facts(workload),
                   "endpoint_keys": _endpoint_keys(request, workload), **extra}
        response = render(request, "jobs/workload_detail.html#endpoint-keys", context)
    else:
        response = render(request, "jobs/workload_detail.html", {**_detail_context(request, workload), **extra})
    response["Cache-Control"] = "no-store"  # it may hold a new key's secret
    return response


@login_required
@require_POST
def endpoint_key_create(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A key for programs to call this server with, shown in this answer only."""
    workload = _visible_workload(request, pk)
    require_perm(request.user, "jobs.manage_endpoint_keys", workload,
                 refusal="Keys are for the members of the team whose server it is.")
    try:
        key, secret = endpoint_keys.key_create(actor=signed_in_user(request), workload=workload,
                                               name=request.POST.get("name", ""))
    except DomainError as refusal:
        return _keys_answer(request, workload, key_error=refusal.message)
    return _keys_answer(request, workload, new_key=key, new_key_secret=secret)


@login_required
@require_POST
def endpoint_key_revoke(request: HtmxHttpRequest, pk: int, key_pk: int) -> HttpResponse:
    workload = _visible_workload(request, pk)
    require_perm(request.user, "jobs.manage_endpoint_keys", workload,
                 refusal="Keys are for the members of the team whose server it is.")
    key = get_object_or_404(workload.endpoint_keys, pk=key_pk)
    try:
        endpoint_keys.key_revoke(actor=signed_in_user(request), key=key)
    except DomainError as refusal:
        return _keys_answer(request, workload, key_error=refusal.message)
    return _keys_answer(request, workload)


@login_required
@require_POST
def workload_try(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One question from the page's Try it box to the server's API, asked by the portal; the
    answer (or what went wrong) in the box."""
    workload = _visible_workload(request, pk)
    require_perm(request.user, "jobs.open_workload", workload, refusal="Only the team whose server it is may try it.")
    if not workload.kind_facts.try_it:
        raise Http404("This workload has no API to try.")
    context: dict[str, Any] = {"workload": workload, "try_values": request.POST, "try_max_tokens": try_it.MAX_TOKENS,
                               **_endpoint_facts(workload)}
    try:
        question = try_it.checked(prompt=request.POST.get("prompt"), model=request.POST.get("model"),
                                  max_tokens=request.POST.get("max_tokens"))
        context["try_reply"] = try_it.ask(user=signed_in_user(request), workload=workload, question=question)
    except DomainError as refusal:
        context["try_error"], context["try_field"] = refusal.message, refusal.field
    if request.htmx:
        return render(request, "jobs/workload_detail.html#try-it", context)
    return render(request, "jobs/workload_detail.html", {**_detail_context(request, workload), **context})


@login_required
@require_POST
def notebook_token(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The owner's hand-over of the notebook's token: in this answer only, never cached."""
    workload = _visible_workload(request, pk)
    try:
        token = services.notebook_token_reveal(user=request.user, workload=workload)
    except DomainError as refusal:
        token, error = "", refusal.message
    else:
        error = ""
    context = {**_detail_context(request, workload), "notebook_token": token, "token_error": error}
    name = "jobs/workload_detail.html#notebook-token" if request.htmx else "jobs/workload_detail.html"
    response = render(request, name, context)
    response["Cache-Control"] = "no-store"
    return response


# --- Workload notifications ---------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def notification_preferences(request: HtmxHttpRequest) -> HttpResponse:
    """How the user hears about their own workloads, per event; the notifications page loads it."""
    done, error = "", ""
    if request.method == "POST":
        choices = {event: request.POST.get(event, "") for event in WorkloadEvent.values if event in request.POST}
        unknown = [event for event, how in choices.items() if how not in NotifyBy.values]
        if unknown:
            error = (f"Choose how to hear about “{WorkloadEvent(unknown[0]).label.lower()}”: "
                     + ", ".join(label.lower() for label in NotifyBy.labels) + ".")
        else:
            notifications.workload_notification_preference_set(user=request.user, choices=choices)
            done = "Saved: you will hear about your workloads as chosen."
    rows = [(event, label, notifications.workload_notification_choice(user=request.user, event=event))
            for event, label in WorkloadEvent.choices]
    template = ("jobs/notification_preferences.html#workload-notifications" if request.htmx
                else "jobs/notification_preferences.html")
    return render(request, template, {"rows": rows, "ways": NotifyBy.choices, "done": done, "error": error},
                  status=400 if error else 200)

