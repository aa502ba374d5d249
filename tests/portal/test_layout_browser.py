"""Every page of the portal as each role (a member, a team lead, finance, a platform admin) at the
widths people use, 320, 390, 768, 1024, 1366 and 1920 px, in Debian's Chromium: no page scrolls
sideways, Log out stays in the window, nothing sticks out of its card, and no table cell breaks a
word in the middle (tests/portal/layout_probe.js says how each is measured, and the first test
proves it sees them).

The pages come from the URL conf: every named route is a page unless NOT_PAGES says why it is not
(and the test checks that it indeed answers no page), so a new page is measured from the day it
has a route, and a route with parameters fails the test until INSTANCES says what to open it with.

The site is the demo's seed plus what the demo lacks: workloads of every kind in several states,
flavors of every sharing mode, last month closed into a statement with an adjustment, budgets (one
holding its team), notifications and tokens. Who may open what is the server's answer: a page
answered with a 403 or 404 is not measured for that role. Each role opens every page with its
first instance; the other instances (each workload, request, flavor, template...) are spread over
the roles, so every variant is drawn once without multiplying the run. One browser context per
role; each page is loaded once and measured at every width by resizing the viewport.

PostgreSQL only (marker `services`): a closed statement cannot be deleted, so the live server's
tables are emptied the way PostgreSQL does it (TRUNCATE), which SQLite's triggers refuse.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse
from django.utils import timezone

from billing import metering, periods
from billing.budgets import services as budgets
from billing.models import Account, Rate, Statement
from billing.statements import services as statements
from jobs import credentials, endpoint_keys, sync
from jobs import services as job_services
from jobs.models import EndpointKey, GpuXidEvent, RunInterval, Workload, WorkloadIdleState, WorkloadTemplate
from portal import tokens
from portal.kube.simulated import SimulatedGateway
from portal.models import ApiToken, Notification, User
from portal.notifications import notify
from tenants import services
from tenants.models import Flavor, GpuNode, Membership, QuotaRequest, Team
from tests.browsing import SHOTS, htmx_settled

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

WIDTHS = [320, 390, 768, 1024, 1366, 1920]
HEIGHT = 900
# The demo's people: alice is a member of vision, lena its lead.
ROLES = {"member": "alice", "lead": "lena", "finance": "finance", "admin": "admin"}
PROBE = (Path(__file__).parent / "layout_probe.js").read_text()

# Not the portal's pages: Django's admin, and the API (its schema, and Swagger's and Redoc's own pages).
OTHER_PREFIXES = ("admin/", "api/", "oidc/")

# Routes a person does not open as a page, and why. Each is asked for with GET, and none may answer
# a page: a new page must not hide here.
NOT_PAGES: dict[str, str] = {
    "logout": "signing out is a POST",
    "favicon": "an image",
    "healthz": "for the orchestrator", "readyz": "for the orchestrator", "metrics": "for Prometheus",
    "api-token-revoke": "a POST",
    "tenants:person-role": "a POST", "tenants:person-active": "a POST", "tenants:person-token-revoke": "a POST",
    "tenants:landing": "a redirect to where a role lands after sign-in",
    "notifications-read": "a POST",
    "notification-bell": "the bell's poll, a fragment of every page",
    "notification-open": "marks it read and goes where it points",
    "jobs:launch-hint": "the launch form's hint, a fragment",
    "jobs:workload-logs-download": "a file",
    "jobs:workload-stop": "a POST", "jobs:workload-keep-running": "a POST", "jobs:workload-scale": "a POST",
    "jobs:workload-relaunch": "a POST", "jobs:notebook-token": "a POST",
    "jobs:workload-open": "goes to the workload's own host",
    "jobs:workload-gate": "the ingress controller's auth check",
    "jobs:workload-gateway-gate": "a Gateway's external authorization check",
    "jobs:workload-try": "a POST (the Try it box's question)",
    "tenants:membership-add": "a POST", "tenants:membership-role": "a POST", "tenants:membership-remove": "a POST",
    "tenants:team-person-limit": "a POST", "tenants:department-delete": "a POST",
    "tenants:quota-preview": "the request form's preview, a fragment",
    "tenants:quota-request-approve": "a POST", "tenants:quota-request-reject": "a POST",
    "tenants:quota-request-cancel": "a POST",
    "billing:idle-policy-set": "a POST",
    "billing:budget-bar": "the team usage page's budget bar, a fragment",
    "billing:statement-close": "a POST",
    "billing:adjustment-add": "a POST",
    "billing:statement-csv": "a file", "billing:statement-pdf": "a file",
    "tenants:node-cordon": "a POST", "jobs:node-drain": "a POST",
    "jobs:volume-create": "a POST", "jobs:volume-resize": "a POST", "jobs:volume-delete": "a POST",
    "jobs:my-notebook": "a POST", "jobs:endpoint-key-create": "a POST", "jobs:endpoint-key-revoke": "a POST",
    "jobs:credential-create": "a POST", "jobs:credential-rotate": "a POST", "jobs:credential-delete": "a POST",
}


@dataclass
class Site:
    users: dict[str, User]
    teams: dict[str, Team]
    flavors: dict[str, Flavor]
    workloads: dict[str, Workload] = field(default_factory=dict)
    closed_month: dt.date = dt.date.min


Instances = Callable[[Site], list[dict[str, Any]]]


def _workloads(*kinds: str) -> Instances:
    return lambda site: [{"pk": site.workloads[kind].pk} for kind in kinds]


def _teams(*slugs: str) -> Instances:
    return lambda site: [{"slug": slug} for slug in slugs]


def _month(site: Site) -> list[dict[str, Any]]:
    return [{"month": f"{site.closed_month:%Y-%m}"}]


def _pending(site: Site) -> list[dict[str, Any]]:
    return [{"pk": QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING).earliest("pk").pk}]


def _vision_membership(site: Site) -> list[dict[str, Any]]:
    return [{"slug": "vision", "pk": Membership.objects.filter(team__slug="vision").earliest("pk").pk}]


def _vision_datasets(site: Site) -> list[dict[str, Any]]:
    return [{"slug": "vision", "name": "datasets"}]


# What each route with parameters is opened with: every instance worth drawing, the first one a page
# every role may open (vision's, where the member and the lead are).
def _busiest_node(site: Site) -> list[dict[str, Any]]:
    """The GPU node with the most of the portal's workloads on it (the longest page of its kind)."""
    busiest = (RunInterval.objects.filter(ended_at__isnull=True).exclude(node="").values("node")
               .annotate(workloads=Count("workload", distinct=True)).order_by("-workloads", "node").first())
    return [{"name": busiest["node"] if busiest else GpuNode.objects.earliest("name").name}]


INSTANCES: dict[str, Instances] = {
    "tenants:node-detail": _busiest_node,
    "tenants:node-cordon": _busiest_node,
    "jobs:node-drain": _busiest_node,
    "tenants:person-detail": lambda site: [{"pk": site.users[name].pk} for name in ("alice", "finance")],
    "tenants:person-role": lambda site: [{"pk": site.users["alice"].pk}],
    "tenants:person-active": lambda site: [{"pk": site.users["alice"].pk}],
    "tenants:person-token-revoke": lambda site: [{"pk": site.users["alice"].pk,
                                                  "token_pk": ApiToken.objects.filter(user__username="alice").earliest("pk").pk}],
    "jobs:template-edit": lambda site: [{"pk": template.pk} for template in WorkloadTemplate.objects.order_by("pk")],
    "jobs:team-gpu-use": _teams("vision"),
    "jobs:team-volumes": _teams("vision", "nlp"),
    "jobs:volume-create": _teams("vision"),
    "jobs:volume-resize": _vision_datasets,
    "jobs:volume-delete": _vision_datasets,
    "jobs:team-credentials": _teams("vision"),
    "jobs:credential-create": _teams("vision"),
    "jobs:credential-rotate": lambda site: [{"slug": "vision", "name": "datalake"}],
    "jobs:credential-delete": lambda site: [{"slug": "vision", "name": "datalake"}],
    "jobs:workload-detail": lambda site: [{"pk": workload.pk} for workload in site.workloads.values()],
    "jobs:workload-live": _workloads("training"),
    "jobs:workload-logs": _workloads("training", "distributed"),
    "jobs:workload-telemetry": _workloads("training", "notebook"),
    "jobs:workload-logs-download": _workloads("training"),
    "jobs:workload-stop": _workloads("training"),
    "jobs:workload-keep-running": _workloads("notebook"),
    "jobs:workload-scale": _workloads("inference"),
    "jobs:workload-relaunch": _workloads("failed"),
    "jobs:workload-open": _workloads("notebook"),
    "jobs:workload-try": _workloads("inference"),
    "jobs:notebook-token": _workloads("notebook"),
    "jobs:workload-gate": _workloads("inference"),
    "jobs:endpoint-key-create": _workloads("inference"),
    "jobs:endpoint-key-revoke": lambda site: [{"pk": site.workloads["inference"].pk,
                                               "key_pk": EndpointKey.objects.earliest("pk").pk}],
    "tenants:team-detail": _teams("vision", "nlp", "recsys"),
    "tenants:team-requests": _teams("vision"),
    "tenants:team-audit": _teams("vision"),
    "tenants:team-cluster": _teams("vision"),
    "tenants:membership-add": _teams("vision"),
    "tenants:team-person-limit": _teams("vision"),
    "tenants:membership-role": _vision_membership,
    "tenants:membership-remove": _vision_membership,
    "tenants:quota-request-detail": lambda site: [{"pk": pk} for pk in _one_request_per_status()],
    "tenants:quota-request-approve": _pending,
    "tenants:quota-request-reject": _pending,
    "tenants:quota-request-cancel": _pending,
    "tenants:team-edit": _teams("vision"),
    "tenants:team-delete": _teams("vision"),
    "tenants:flavor-edit": lambda site: [{"slug": slug} for slug in site.flavors],
    "tenants:department-edit": lambda site: [{"slug": "research"}],  # the demo's (demo.site.DEPARTMENT)
    "tenants:department-delete": lambda site: [{"slug": "research"}],
    "billing:team-usage": _teams("vision", "nlp", "recsys"),
    "billing:team-efficiency": _teams("vision"),
    "billing:idle-policy-set": lambda site: [{"slug": "h100-80gb"}],
    "billing:budget-detail": _teams("vision", "nlp", "recsys"),
    "billing:budget-bar": _teams("vision"),
    "billing:statement-detail": lambda site: [*_month(site), {"month": f"{periods.current_month():%Y-%m}"}],
    "billing:adjustment-add": _month,
    "billing:statement-csv": _month,
    "billing:statement-pdf": _month,
    "api-token-revoke": lambda site: [{"pk": ApiToken.objects.filter(user__username="alice").earliest("pk").pk}],
    "notification-open": lambda site: [{"pk": Notification.objects.filter(recipient__username="alice").earliest("pk").pk}],
}


def _one_request_per_status() -> list[int]:
    """A request in each state, vision's where it has one (the member and the lead see those)."""
    chosen: dict[str, int] = {}
    for request in sorted(QuotaRequest.objects.select_related("team"), key=lambda r: (r.team.slug != "vision", r.pk)):
        chosen.setdefault(request.status, request.pk)
    return list(chosen.values())


def routes() -> list[tuple[str, str]]:
    """Every named route of the URL conf but the admin's and the API's, as (its pattern, its name)."""
    def walk(patterns: list[Any], prefix: str, namespace: str) -> list[tuple[str, str]]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                found += walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
            elif pattern.name:
                found.append((prefix + str(pattern.pattern), namespace + pattern.name))
        return found
    return [(route, name) for route, name in walk(get_resolver().url_patterns, "", "") if not route.startswith(OTHER_PREFIXES)]


def urls_of(name: str, site: Site) -> list[str]:
    return [reverse(name, kwargs=kwargs) for kwargs in INSTANCES[name](site)] if name in INSTANCES else [reverse(name)]


# --- The probe proves it sees what it looks for -------------------------------------------------------

BROKEN = """<!doctype html><html><head><style>
  body { margin:0; font:16px/1.2 monospace; }
  .card { width:300px; border:1px solid; }
  table { table-layout:fixed; border-collapse:collapse; }
  td { padding:0; overflow-wrap:anywhere; }
</style></head><body>
  <div class="card">
    <table><tr><td style="width:5ch">vision</td><td style="width:7ch">Approved</td></tr></table>
    <div style="width:420px">a row of buttons wider than its card</div>
  </div>
  <main><div style="width:2400px">a banner wider than any window</div></main>
  <form method="post" action="/logout/"><button style="margin-left:1100px">Log out</button></form>
</body></html>"""

WHOLE = """<!doctype html><html><head><style>
  body { margin:0; font:16px/1.2 monospace; } .card { width:300px; border:1px solid; }
  .table-scroll { overflow-x:auto; } td { padding:0 .5ch; }
</style></head><body>
  <div class="card"><div class="table-scroll"><table><tr><td>vision</td><td>Approved</td>
    <td>registry.example.com/research/pytorch/pytorch-with-extras:2.5.1-cuda12.4</td>
    <td>A rather long justification that wraps at its spaces</td></tr></table></div>
    <table style="table-layout:fixed"><tr><td style="width:16ch">nvidia.com/mig-1g.10gb</td></tr></table></div>
</body></html>"""


def test_the_probe_finds_a_page_too_wide_log_out_out_of_reach_a_card_spilling_and_words_broken_in_a_cell(browser):
    page = browser.new_page(viewport={"width": 1024, "height": HEIGHT})
    page.set_content(BROKEN)
    found = page.evaluate(PROBE)
    assert found[:2] == ["the page is 2400 px wide in a 1024 px window", "Log out is out of the window, at 1100 px"]
    spilling = r'div "a row of buttons wider than its card" sticks out of div\.card ".*": 1\d\d px past the right'
    assert any(re.fullmatch(spilling, f) for f in found), found
    broken = [f.rpartition(": ")[2] for f in found if f.startswith("a word is broken")]
    assert broken == ['"visio|n"', '"Approve|d"'], found

    # A table in its wrapper scrolls; a sentence wraps at its spaces and a resource name at its hyphen.
    page.set_content(WHOLE)
    assert page.evaluate("() => document.querySelector('td[style]').getClientRects().length && "
                         "document.querySelector('td[style]').offsetHeight > 30")  # the name did wrap
    assert page.evaluate(PROBE) == []


# --- Every page, every role, every width ------------------------------------------------------------


def test_every_route_is_either_measured_or_named_as_no_page():
    names = {name for _, name in routes()}
    assert set(NOT_PAGES) <= names, f"NOT_PAGES names routes that are gone: {set(NOT_PAGES) - names}"
    unknown = sorted(name for route, name in routes() if "<" in route and name not in INSTANCES)
    assert unknown == [], f"routes with parameters the layout test cannot open: add them to INSTANCES: {unknown}"


def test_every_page_fits_every_width_for_every_role(browser, live_server, simulated, gpu_metrics):
    if connection.vendor != "postgresql":
        pytest.fail("This test needs PostgreSQL: run it through scripts/with-services.sh (as `make test` does)")
    site = build_site(simulated)
    started = time.monotonic()
    _assert_not_pages_answer_no_page(site)

    pages = [(name, urls_of(name, site)) for _, name in routes() if name not in NOT_PAGES]
    contexts = {role: _signed_in(browser, live_server, site.users[username]) for role, username in ROLES.items()}
    measured: dict[str, list[str]] = {}  # route name -> the roles it was measured as
    faults: dict[tuple[str, str, str], list[int]] = {}  # (url, role, fault) -> the widths it shows at
    heights: dict[str, int] = {}  # url -> how tall at 1366 px
    loads = 0

    def measure(role: str, url: str, *, status: int = 200) -> bool:
        """Loads the page as the role and measures it at every width; False when it is not the role's to see."""
        nonlocal loads
        page = contexts[role]
        loads += 1
        response = page.goto(f"{live_server.url}{url}")
        if (response is None or response.status != status or response.request.redirected_from is not None
                or not page.evaluate("() => document.doctype !== null")):
            return False
        htmx_settled(page)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            found = page.evaluate(PROBE)
            for fault in found:  # the same fault at several widths is said once, with its widths
                faults.setdefault((url, role, re.sub(r"\d+ px", "N px", fault)), []).append(width)
            if found:
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / f"layout-{role}-{width}{url.replace('/', '_')}.png"), full_page=True)
            if width == 1366:
                heights[url] = page.evaluate("() => document.documentElement.scrollHeight")
        return True

    roles = list(ROLES)
    for name, urls in pages:
        for role in roles:
            if measure(role, urls[0]):
                measured.setdefault(name, []).append(role)
        for n, url in enumerate(urls[1:], start=1):
            # The other instances, each by the next role in turn that may open it.
            turn = roles[n % len(roles):] + roles[:n % len(roles)]
            next((role for role in turn if measure(role, url)), None)
    for role in roles:  # the error pages have the site's navigation too
        assert measure(role, "/no/such/page/", status=404)
    elapsed = time.monotonic() - started

    print(f"\n{sum(map(len, measured.values()))} pages as a role ({loads} loads) measured at {len(WIDTHS)} widths "
          f"in {elapsed:.0f} s")
    unmeasured = sorted(name for name, _ in pages if name not in measured)
    assert unmeasured == [], (f"routes no role could open as a page: {unmeasured}. If one is not a page, add it to "
                              "NOT_PAGES with why; if it is, INSTANCES opens it with the wrong parameters")
    said = [f"{url} as {role} at {', '.join(map(str, widths))} px: {fault}" for (url, role, fault), widths in faults.items()]
    assert said == [], f"{len(said)} layout faults (screenshots in {SHOTS}):\n" + "\n".join(said[:80])
    # The template editor was 3,440 px tall at 1366 px: its sections now sit side by side, the idle policy folded.
    editors = {url: height for url, height in heights.items() if url.startswith("/templates/") and url != "/templates/"}
    assert editors and max(editors.values()) < 2000, editors


def _assert_not_pages_answer_no_page(site: Site) -> None:
    """Each route NOT_PAGES names, asked with GET, answers no page: a method refused, a redirect, a
    file or a fragment, to the first role it does not refuse (a 403 or a 404 says nothing of the route)."""
    clients = [Client() for _ in ROLES]
    for client, username in zip(clients, ROLES.values(), strict=True):
        client.force_login(site.users[username])
    pages = []
    for name in NOT_PAGES:
        url = urls_of(name, site)[0]
        answer = next((a for a in (client.get(url) for client in clients) if a.status_code not in (403, 404)), None)
        if answer is None or answer.status_code != 200 or not answer.get("Content-Type", "").startswith("text/html"):
            continue
        if not answer.streaming and answer.content.lstrip()[:15].lower() == b"<!doctype html>":
            pages.append(name)
    assert pages == [], f"NOT_PAGES names routes that answer a page: measure them instead: {pages}"


def _signed_in(browser: Any, live_server: Any, user: User) -> Any:
    """A page in a context of its own, signed in by its session cookie (quicker than the form, which
    tests/portal/test_ux_browser.py and others drive)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": WIDTHS[-1], "height": HEIGHT})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "url": live_server.url,
                          "value": client.cookies[settings.SESSION_COOKIE_NAME].value}])
    return context.new_page()


# --- The site ---------------------------------------------------------------------------------------

EXTRA_FLAVORS: list[dict[str, Any]] = [
    dict(name="A100 80GB MPS quarter", slug="a100-mps-4", resource_name="nvidia.com/gpu.mps", sharing_mode="mps",
         gpu_model="NVIDIA A100 80GB PCIe", fraction_numerator=1, fraction_denominator=4, capacity_units=16,
         node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe", "nvidia.com/mps.capable": "true"}),
    dict(name="T4 16GB by the GiB", slug="t4-gib", resource_name="aliyun.com/gpu-mem", sharing_mode="gpu-memory",
         gpu_model="NVIDIA Tesla T4", fraction_numerator=1, fraction_denominator=16, capacity_units=64,
         node_labels={"gpu-portal.io/gpu-share": "t4"}),
]
# A price for each flavor from before last month, where the demo has none that early (its history may be shorter).
PRICES = {"h100-80gb": "2.75", "a100-1g-10gb": "1.80", "t4-shared": "0.35", "a100-mps-4": "0.70", "t4-gib": "0.03"}


def build_site(cluster: SimulatedGateway) -> Site:
    """The demo's site (what `manage.py seed_demo` makes), and what a page can show beyond it."""
    call_command("seed_demo", stdout=StringIO())
    users = {user.username: user for user in User.objects.all()}
    admin, finance = users["admin"], users["finance"]
    for spec in EXTRA_FLAVORS:
        services.flavor_save(actor=admin, flavor=Flavor(**spec))
    site = Site(users=users, teams={team.slug: team for team in Team.objects.all()},
                flavors={flavor.slug: flavor for flavor in Flavor.objects.order_by("slug")})
    now = timezone.now()
    last_month = periods.month_start(periods.current_month() - dt.timedelta(days=1))
    start, _ = periods.month_bounds(last_month)
    for slug, price in PRICES.items():
        if not Rate.objects.filter(flavor__slug=slug, effective_from__lte=start).exists():
            Rate.objects.create(flavor=site.flavors[slug], price_per_gpu_hour=Decimal(price), currency="USD",
                                effective_from=start - dt.timedelta(days=31), note="List price", created_by=finance)

    # Last month closed into a statement (the demo's own, where its history reaches that far), then corrected.
    statement = Statement.objects.filter(month=last_month).first()
    if statement is None:
        _ran(_launch(site, "alice", "vision", "pytorch-training", "h100-80gb", "detector-baseline"),
             started=start + dt.timedelta(days=3, hours=2), hours=30, units=1)
        _ran(_launch(site, "carol", "recsys", "pytorch-training", "a100-1g-10gb", "ranker-nightly-retraining"),
             started=start + dt.timedelta(days=5), hours=60, units=1)
        metering.rollups_refresh()
        statement = statements.statement_close(actor=finance, month=last_month)
    statements.adjustment_add(actor=finance, statement=statement, account=Account.for_team(site.teams["vision"]),
                              amount="-12.50", reason="GPU 3 of node gpu-h100-07 was broken for five hours (XID 79)")
    site.closed_month = last_month
    budgets.budget_set(actor=finance, team=site.teams["nlp"], amount="250", currency="USD", hard_stop=True)
    budgets.budget_set(actor=finance, team=site.teams["recsys"], amount="12000", currency="USD")

    # Workloads of every kind, running, waiting and ended, with an XID and an idle warning.
    w = site.workloads
    w["training"] = _launch(site, "alice", "vision", "pytorch-training", "h100-80gb", "detector-finetune-with-augmentations",
                            units=2)
    w["notebook"] = _launch(site, "alice", "vision", "jupyterlab", "t4-shared", "alice-exploration")
    w["inference"] = _launch(site, "lena", "vision", "vllm-inference", "h100-80gb", "assistant-serving",
                             parameters={"workers": 2})
    w["distributed"] = _launch(site, "bob", "vision", "pytorch-distributed", "h100-80gb", "pretrain-giant", units=8,
                               parameters={"workers": 4})  # more than the cluster has: it waits
    w["failed"] = _launch(site, "alice", "vision", "pytorch-training", "t4-shared", "segmenter-sweep-lr-0.003")
    w["stopped"] = _launch(site, "alice", "vision", "jupyterlab", "a100-1g-10gb", "old-notebook")
    for _ in range(3):
        cluster.advance(5)
        sync.sync_all()
    job_services.record_transition(w["failed"], Workload.Phase.FAILED, "Exit code 1: CUDA out of memory. Tried to "
                                   "allocate 20.00 GiB (GPU 0; 15.75 GiB total capacity; 12.30 GiB already allocated)")
    job_services.workload_stop(user=users["alice"], workload=w["stopped"])
    w["succeeded"] = Workload.objects.filter(team__slug="vision", phase=Workload.Phase.SUCCEEDED).earliest("pk")
    pod = RunInterval.objects.filter(workload=w["training"]).first()
    GpuXidEvent.objects.create(workload=w["training"], pod_name=pod.pod_name if pod else "wl-0", node="gpu-h100-07",
                               gpu="GPU-5b3e0f2a-91c4-4d7e-b8a1-0c9d2e6f7a13", code=79, hardware=True, at=now)
    WorkloadIdleState.objects.update_or_create(workload=w["notebook"], defaults=dict(
        checked_at=now, engine_active=0.4, idle_since=now - dt.timedelta(minutes=50),
        warned_at=now - dt.timedelta(minutes=5), action_due_at=now + dt.timedelta(minutes=10)))
    for user in users.values():
        notify(recipients=[user], message=f"lena approved vision's request for 4 × H100 80GB until {now:%Y-%m-%d}.",
               url=reverse("tenants:quota-request-list"))
        tokens.api_token_create(user=user, name="laptop-jupyter-scripts", expires_in_days=90)
    endpoint_keys.key_create(actor=users["lena"], workload=w["inference"], name="eval-nightly")
    credentials.credential_create(actor=users["alice"], team=Team.objects.get(slug="vision"), name="datalake", kind="s3",
                                  values={"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "not-a-real-one",
                                          "endpoint": "https://minio.storage.internal.example.com"})
    for workload in w.values():
        workload.refresh_from_db()
    return site


def _launch(site: Site, owner: str, team: str, template: str, flavor: str, name: str, **request: Any) -> Workload:
    return job_services.workload_launch(user=site.users[owner], request=job_services.LaunchRequest(
        team=site.teams[team], template=WorkloadTemplate.objects.get(slug=template), flavor=site.flavors[flavor],
        name=name, **request))


def _ran(workload: Workload, *, started: dt.datetime, hours: int, units: int) -> None:
    """A run of last month, as the status sync would have recorded it."""
    ended = started + dt.timedelta(hours=hours)
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.SUCCEEDED, created_at=started,
                                                   submitted_at=started, finished_at=ended)
    RunInterval.objects.create(workload=workload, pod_uid=f"last-month-{workload.pk}", pod_name=f"wl-{workload.pk}-0",
                               node="gpu-node-3", resource_name=workload.flavor.resource_name, units=units,
                               started_at=started, ended_at=ended)
