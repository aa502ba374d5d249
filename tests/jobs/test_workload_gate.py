"""The portal's gate in front of workload Ingresses (jobs/access.py): who gets through, how a
browser is handed over from the portal's session, and what the workload learns of its callers."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs import access, services
from jobs.models import Workload, WorkloadKind
from portal import tokens
from portal.models import ApiToken
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import launch

pytestmark = pytest.mark.django_db

HOST_DOMAIN = "apps.example.com"


@pytest.fixture(autouse=True)
def _ingress(settings):
    settings.PORTAL_INGRESS_DOMAIN = HOST_DOMAIN
    settings.PORTAL_INGRESS_TLS_SECRET = "apps-wildcard"
    settings.PORTAL_INGRESS_CLUSTER_ISSUER = ""


@pytest.fixture
def notebook_template(admin_user, flavor):
    return services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                    flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])


@pytest.fixture
def inference_template(admin_user, flavor):
    return services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE,
                                    flavors=[flavor], image="vllm/vllm-openai:0.6", port=8000, parameters=[])


@pytest.fixture
def notebook(ready_team, member, notebook_template, flavor) -> Workload:
    return launch(member, ready_team, notebook_template, flavor)


@pytest.fixture
def server(ready_team, member, inference_template, flavor) -> Workload:
    return launch(member, ready_team, inference_template, flavor)


@pytest.fixture
def teammate(team):
    user = UserFactory(username="tom")
    MembershipFactory(team=team, user=user)
    return user


def gate(workload_id: int, *, client: Client | None = None, token: str = "", method: str = "GET", url: str = "",
         authorization: str = "") -> Any:
    headers: dict[str, Any] = {"HTTP_X_ORIGINAL_METHOD": method, "HTTP_X_ORIGINAL_URL": url or f"https://wl-{workload_id}.x/"}
    if token or authorization:
        headers["HTTP_AUTHORIZATION"] = authorization or f"Token {token}"
    return (client or Client()).get(f"/auth/workloads/{workload_id}/", **headers)


def token_of(user: Any, scope: str = ApiToken.Scope.WRITE) -> str:
    return tokens.api_token_create(user=user, name="script", expires_in_days=30, scope=scope)[1]


# --- Who gets through ----------------------------------------------------------------------------


def test_nobody_gets_through_without_saying_who_they_are(notebook, server):
    for workload in (notebook, server):
        response = gate(workload.pk)
        assert response.status_code == 401
        assert "X-Portal-User" not in response and "Set-Cookie" not in response


def test_a_notebook_lets_only_its_owner_through(notebook, member, teammate, lead, admin_user, finance_user, outsider):
    assert gate(notebook.pk, token=token_of(member)).status_code == 200
    for other in (teammate, lead, admin_user, finance_user, outsider):
        assert gate(notebook.pk, token=token_of(other)).status_code == 403, other.username
        assert gate(notebook.pk, client=login(other)).status_code == 403, other.username


def test_an_inference_server_lets_its_team_through_and_nobody_else(server, member, teammate, lead, admin_user,
                                                                    finance_user, outsider):
    for user in (member, teammate, lead):
        response = gate(server.pk, token=token_of(user))
        assert response.status_code == 200, user.username
        assert response["X-Portal-User"] == user.username
    # Seeing every team's workloads is not using them.
    for other in (admin_user, finance_user, outsider):
        assert gate(server.pk, token=token_of(other)).status_code == 403, other.username


def test_another_teams_workload_answers_exactly_as_one_that_does_not_exist(server, outsider):
    secret = token_of(outsider)
    foreign, missing = gate(server.pk, token=secret), gate(server.pk + 1000, token=secret)
    assert (foreign.status_code, foreign.content, sorted(foreign.headers)) == (
        missing.status_code, missing.content, sorted(missing.headers))
    assert foreign.status_code == 403


def test_a_read_only_token_may_read_but_not_post_to_a_server(server, member):
    read_only, read_write = token_of(member, ApiToken.Scope.READ), token_of(member)
    assert gate(server.pk, token=read_only, method="GET").status_code == 200
    assert gate(server.pk, token=read_only, method="POST").status_code == 403
    assert gate(server.pk, token=read_write, method="POST").status_code == 200


def test_revoked_expired_and_deactivated_tokens_are_asked_who_they_are(server, member, teammate):
    revoked = token_of(member)
    assert gate(server.pk, token=revoked).status_code == 200
    tokens.api_token_revoke(token=ApiToken.objects.get(digest=ApiToken.digest_of(revoked)), actor=member)
    assert gate(server.pk, token=revoked).status_code == 401

    expired = token_of(member)
    ApiToken.objects.filter(digest=ApiToken.digest_of(expired)).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert gate(server.pk, token=expired).status_code == 401

    theirs = token_of(teammate)
    assert gate(server.pk, token=theirs).status_code == 200
    teammate.is_active = False
    teammate.save()
    assert gate(server.pk, token=theirs).status_code == 401
    assert gate(server.pk, token="gpp_made-up").status_code == 401


def test_a_member_who_leaves_the_team_is_out_at_the_next_request(server, teammate):
    secret = token_of(teammate)
    assert gate(server.pk, token=secret).status_code == 200
    teammate.memberships.all().delete()
    assert gate(server.pk, token=secret).status_code == 403


def test_the_gate_never_redirects_and_answers_in_a_few_queries(notebook, member, outsider):
    secret = token_of(member)
    counted: list[int] = []
    for kwargs in ({}, {"token": secret}, {"token": token_of(outsider)}, {"token": "gpp_unknown"},
                   {"client": login(member)}, {"authorization": "Bearer not-a-portal-token"}):
        connection.queries_log.clear()  # a full log (it keeps 9,000) would count nothing new
        with CaptureQueriesContext(connection) as queries:
            response = gate(notebook.pk, **kwargs)
        assert response.status_code in (200, 401, 403) and "Location" not in response, kwargs
        assert len(queries) <= 6, [q["sql"] for q in queries]  # the session path: load, user, idle refresh
        assert response["Cache-Control"] == "no-store"
        counted.append(len(queries))
    assert counted[0] == 0 and counted[1] > 0  # nobody costs nothing; a token is looked up


# --- What the workload learns ----------------------------------------------------------------------


def test_the_workload_never_receives_its_callers_portal_token(server, member):
    response = gate(server.pk, token=token_of(member))
    # auth-response-headers lists Authorization: an answer without it takes the caller's off the request.
    assert response.status_code == 200 and "Authorization" not in response


def test_a_servers_own_authorization_passes_through_for_a_caller_the_portal_knows(server, member):
    response = gate(server.pk, client=login(member), authorization="Bearer sk-the-servers-own-key")
    assert response.status_code == 200
    assert response["Authorization"] == "Bearer sk-the-servers-own-key"


# --- The browser's way in: from the portal's session to the workload's host ------------------------


def open_notebook(client: Client, workload: Workload, rd: str = "/lab?reset") -> str:
    response = client.get(reverse("jobs:workload-open", args=[workload.pk]), {"rd": rd})
    assert response.status_code == 302, response.status_code
    return response["Location"]


def test_a_browser_is_handed_over_once_and_then_holds_a_cookie_for_that_workload_only(notebook, member, ready_team,
                                                                                      notebook_template, flavor):
    location = open_notebook(login(member), notebook)
    parts = urllib.parse.urlsplit(location)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", f"wl-{notebook.pk}-vision.{HOST_DOMAIN}", "/lab")
    assert urllib.parse.parse_qs(parts.query, keep_blank_values=True).keys() == {"reset", access.TICKET_PARAM}

    host = Client()  # the workload's host: the portal's session cookie never comes here
    first = gate(notebook.pk, client=host, url=location)
    assert first.status_code == 200 and first["X-Portal-User"] == "alice"
    cookie = first.cookies[access.ACCESS_COOKIE]
    assert cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "Lax" and not cookie["domain"]

    assert gate(notebook.pk, url=location).status_code == 401  # the ticket is spent
    assert gate(notebook.pk, client=host).status_code == 200  # the cookie carries on

    other = launch(member, ready_team, notebook_template, flavor)
    assert gate(other.pk, client=host).status_code == 401  # and opens nothing else


def test_the_hand_over_works_while_the_cache_is_away_and_a_ticket_still_opens_once(notebook, member, settings):
    with socket.socket() as probe:  # nothing listens here: Redis is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{port}/0"}}
    location = open_notebook(login(member), notebook)
    assert gate(notebook.pk, url=location).status_code == 200
    assert gate(notebook.pk, url=location).status_code == 401  # spent, as recorded in the database


def test_spent_tickets_are_forgotten_once_they_could_no_longer_be_spent(notebook, member):
    from jobs.models import SpentTicket

    SpentTicket.objects.create(nonce="long-ago", spent_at=timezone.now() - dt.timedelta(seconds=access.TICKET_SECONDS * 3))
    assert gate(notebook.pk, url=open_notebook(login(member), notebook)).status_code == 200
    assert not SpentTicket.objects.filter(nonce="long-ago").exists() and SpentTicket.objects.count() == 1


def test_a_ticket_for_one_workload_opens_no_other(notebook, member, ready_team, notebook_template, flavor):
    other = launch(member, ready_team, notebook_template, flavor)
    location = open_notebook(login(member), notebook)
    assert gate(other.pk, url=location).status_code == 401


def test_a_deactivated_or_re_passworded_owner_loses_the_cookie(notebook, member):
    host = Client()
    assert gate(notebook.pk, client=host, url=open_notebook(login(member), notebook)).status_code == 200
    member.set_password("a-new-one-entirely")
    member.save()
    assert gate(notebook.pk, client=host).status_code == 401

    host = Client()
    assert gate(notebook.pk, client=host, url=open_notebook(login(member), notebook)).status_code == 200
    member.is_active = False
    member.save()
    assert gate(notebook.pk, client=host).status_code == 401


def test_someone_who_may_not_open_a_workload_is_told_so_by_the_portal_not_sent_round(notebook, server, teammate,
                                                                                     outsider, admin_user):
    assert login(teammate).get(reverse("jobs:workload-open", args=[notebook.pk])).status_code == 403
    assert login(admin_user).get(reverse("jobs:workload-open", args=[notebook.pk])).status_code == 403
    assert login(outsider).get(reverse("jobs:workload-open", args=[notebook.pk])).status_code == 404
    assert login(outsider).get(reverse("jobs:workload-open", args=[server.pk])).status_code == 404
    anonymous = Client().get(reverse("jobs:workload-open", args=[notebook.pk]))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


@pytest.mark.parametrize("rd", ["//evil.example/x", "https://evil.example/", "\\\\evil.example", "lab", "/x\r\nSet-Cookie: a=b"])
def test_the_way_back_stays_on_the_workloads_host(notebook, member, rd):
    parts = urllib.parse.urlsplit(open_notebook(login(member), notebook, rd=rd))
    assert parts.netloc == f"wl-{notebook.pk}-vision.{HOST_DOMAIN}" and parts.path == "/"


def test_a_workload_without_an_ingress_has_nothing_to_open(notebook, member, settings):
    settings.PORTAL_INGRESS_DOMAIN = ""
    assert login(member).get(reverse("jobs:workload-open", args=[notebook.pk])).status_code == 404


# --- TLS: the page claims https only when there is a certificate ------------------------------------


@pytest.mark.parametrize(("tls_secret", "issuer", "scheme"), [
    ("apps-wildcard", "", "https"), ("", "letsencrypt", "https"), ("", "", "http"),
])
def test_the_endpoint_says_https_only_with_a_certificate(notebook, member, settings, tls_secret, issuer, scheme):
    settings.PORTAL_INGRESS_TLS_SECRET, settings.PORTAL_INGRESS_CLUSTER_ISSUER = tls_secret, issuer
    page = login(member).get(reverse("jobs:workload-detail", args=[notebook.pk])).content.decode()
    assert f"{scheme}://wl-{notebook.pk}-vision.{HOST_DOMAIN}/" in page
    if scheme == "http":
        assert "https://" not in page
    ingress = services.ingress_spec(notebook)
    assert ingress is not None and ingress.tls == (scheme == "https")
    location = urllib.parse.urlsplit(open_notebook(login(member), notebook))
    assert location.scheme == scheme


def test_the_ingress_sends_the_controller_to_the_gate_and_browsers_to_the_portal(notebook, settings):
    settings.PORTAL_INGRESS_AUTH_URL = "http://gpu-portal.gpu-portal.svc.cluster.local"
    settings.SITE_URL = "https://portal.example.com"
    ingress = services.ingress_spec(notebook)
    assert ingress is not None
    assert ingress.auth_url == f"http://gpu-portal.gpu-portal.svc.cluster.local/auth/workloads/{notebook.pk}/"
    assert ingress.signin_url == f"https://portal.example.com/workloads/{notebook.pk}/open/?rd=$escaped_request_uri"
    assert reverse("jobs:workload-gate", args=[notebook.pk]) == urllib.parse.urlsplit(ingress.auth_url).path
    assert reverse("jobs:workload-open", args=[notebook.pk]) == urllib.parse.urlsplit(ingress.signin_url).path


# --- Settings ------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "PORTAL_PRODUCTION": "1", "SECRET_KEY": "x" * 60, "DATABASE_URL": "postgres://u@127.0.0.1:1/db",
    "REDIS_URL": "redis://127.0.0.1:1/0", "SITE_URL": "https://portal.example.com", "ALLOWED_HOSTS": "portal.example.com",
    "DJANGO_SETTINGS_MODULE": "portal.settings",
}


def settings_in_a_fresh_process(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in env and not k.startswith("PORTAL_INGRESS")}
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT,
                          env={**clean, **env}, capture_output=True, text=True, timeout=60)


def test_production_does_not_redirect_the_controllers_call_to_the_gate(tmp_path):
    code = ("from django.conf import settings; import re; "
            "print(any(re.search(r, 'auth/workloads/42/') for r in settings.SECURE_REDIRECT_EXEMPT), "
            "all(any(re.search(r, p) for r in settings.SECURE_REDIRECT_EXEMPT) for p in ('auth/gateway', 'auth/gateway/lab')), "
            "settings.SECURE_SSL_REDIRECT)")
    result = settings_in_a_fresh_process({**PRODUCTION, "PORTAL_VAR_DIR": str(tmp_path)}, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True True True"


def test_a_wildcard_certificate_and_an_issuer_together_refuse_to_start(tmp_path):
    env = {"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings",
           "PORTAL_INGRESS_TLS_SECRET": "apps-wildcard", "PORTAL_INGRESS_CLUSTER_ISSUER": "letsencrypt"}
    result = settings_in_a_fresh_process(env, "pass")
    assert result.returncode != 0
    assert "not both" in result.stderr


@pytest.mark.parametrize(("env", "words"), [
    ({"PORTAL_ENDPOINT_ROUTES": "traefik"}, "must be “ingress” or “gateway”"),
    ({"PORTAL_ENDPOINT_ROUTES": "gateway", "PORTAL_INGRESS_DOMAIN": "apps.example.com"}, "set PORTAL_GATEWAY"),
    ({"PORTAL_GATEWAY": "apps"}, "is not namespace/name or namespace/name/listener"),
    ({"PORTAL_GATEWAY": "gateways/Apps"}, "is not namespace/name or namespace/name/listener"),
    ({"PORTAL_GATEWAY_AUTH_SERVICE": "gpu-portal/gpu-portal"}, "is not namespace/name:port"),
    ({"PORTAL_GATEWAY_AUTH_SERVICE": "gpu-portal/gpu-portal:70000"}, "is not namespace/name:port"),
])
def test_a_gateway_named_wrongly_refuses_to_start_and_says_how_to_write_it(tmp_path, env, words):
    result = settings_in_a_fresh_process({"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings",
                                          **env}, "pass")
    assert result.returncode != 0
    assert words in result.stderr


def test_a_gateway_named_rightly_is_read_into_its_parts(tmp_path):
    env = {"PORTAL_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_ENDPOINT_ROUTES": "Gateway",
           "PORTAL_INGRESS_DOMAIN": "apps.example.com", "PORTAL_GATEWAY": "gateways/apps/https",
           "PORTAL_GATEWAY_AUTH_SERVICE": "gpu-portal/gpu-portal:8080"}
    code = ("from django.conf import settings as s; "
            "print(s.PORTAL_ENDPOINT_ROUTES, s.PORTAL_GATEWAY, s.PORTAL_GATEWAY_AUTH_SERVICE, s.PORTAL_GATEWAY_TLS)")
    result = settings_in_a_fresh_process(env, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "gateway ('gateways', 'apps', 'https') ('gpu-portal', 'gpu-portal', 8080) True"


# --- Through a Gateway (Gateway API's ExternalAuth, HTTP) --------------------------------------------
# A conformant gateway asks /auth/gateway followed by the request's own path, with the request's
# method, its Host (the workload's), Authorization, and the route's allowedHeaders (Cookie,
# Accept); its answer other than 200 goes to the client as it is.


@pytest.fixture
def gateway_routes(settings):
    settings.PORTAL_ENDPOINT_ROUTES = "gateway"
    settings.PORTAL_GATEWAY = ("gateways", "apps", "https")
    settings.PORTAL_GATEWAY_TLS = True


def ask(workload: Workload | None, path: str = "/", *, client: Client | None = None, method: str = "get",
        host: str = "", authorization: str = "", accept: str = "") -> Any:
    headers: dict[str, Any] = {"HTTP_HOST": host or services.ingress_host(workload)}  # type: ignore[arg-type]
    if authorization:
        headers["HTTP_AUTHORIZATION"] = authorization
    if accept:
        headers["HTTP_ACCEPT"] = accept
    return getattr(client or Client(), method)(f"/auth/gateway{path}", **headers)


def test_through_a_gateway_the_host_names_the_workload_and_the_same_people_get_through(
        gateway_routes, notebook, server, member, teammate, outsider):
    assert ask(notebook, "/lab", authorization=f"Token {token_of(member)}").status_code == 200
    assert ask(notebook, "/lab", authorization=f"Token {token_of(teammate)}").status_code == 403
    for user in (member, teammate):
        answer = ask(server, "/v1/models", authorization=f"Token {token_of(user)}")
        assert (answer.status_code, answer["X-Portal-User"]) == (200, user.username)
        # Always sent, empty here: the gateway copies it over the caller's portal token.
        assert answer["Authorization"] == ""
    assert ask(server, "/v1/models", authorization=f"Token {token_of(outsider)}").status_code == 403
    # Every method the request had reaches the gate as it is (no CSRF refusal of a POST).
    assert ask(server, "/v1/chat/completions", method="post", authorization=f"Token {token_of(member)}").status_code == 200
    read_only = token_of(member, ApiToken.Scope.READ)
    assert ask(server, "/v1/completions", method="post", authorization=f"Token {read_only}").status_code == 403


def test_through_a_gateway_a_host_that_is_no_workloads_gets_nothing_and_the_portal_is_not_served_there(
        gateway_routes, server, member):
    secret = f"Token {token_of(member)}"
    for host in (f"wl-{server.pk}-other.{HOST_DOMAIN}", f"wl-{server.pk + 1000}-vision.{HOST_DOMAIN}",
                 f"wl-{server.pk}-vision.evil.example", "gpu-portal.example.com"):
        answer = ask(None, "/v1/models", host=host, authorization=secret)
        assert answer.status_code == 403 and "X-Portal-User" not in answer, host
    # The workload's host reaches the gate only: the portal's pages still refuse it.
    assert Client().get("/", HTTP_HOST=services.ingress_host(server)).status_code == 400


def test_through_a_gateway_a_browser_is_sent_to_sign_in_and_a_program_is_asked_who_it_is(gateway_routes, notebook):
    browser = ask(notebook, "/lab/tree?x=1", accept="text/html,application/xhtml+xml")
    assert browser.status_code == 302
    parts = urllib.parse.urlsplit(browser["Location"])
    assert parts.path == reverse("jobs:workload-open", args=[notebook.pk])
    assert urllib.parse.parse_qs(parts.query) == {"rd": ["/lab/tree?x=1"]}
    assert ask(notebook, "/api/kernels", accept="application/json").status_code == 401
    assert ask(notebook, "/lab", method="post", accept="text/html").status_code == 401


def test_through_a_gateway_a_ticket_is_spent_once_into_a_cookie_by_a_redirect(gateway_routes, notebook, member):
    location = open_notebook(login(member), notebook)
    parts = urllib.parse.urlsplit(location)
    assert (parts.scheme, parts.netloc) == ("https", services.ingress_host(notebook))
    host = Client()
    # A gateway passes no cookie to the client on 200: the gate answers a redirect to the same
    # path without the ticket, with the cookie, and the gateway hands that answer to the browser.
    spent = ask(notebook, f"{parts.path}?{parts.query}", client=host, accept="text/html")
    assert spent.status_code == 302 and spent["Location"] == "/lab?reset="
    cookie = spent.cookies[access.ACCESS_COOKIE]
    assert cookie["httponly"] and cookie["secure"] and not cookie["domain"]
    assert ask(notebook, "/lab?reset=", client=host, accept="text/html").status_code == 200  # the cookie carries on
    again = ask(notebook, f"{parts.path}?{parts.query}", accept="text/html")
    assert again.status_code == 302 and "/open/" in again["Location"]  # spent: sent to sign in again, not let in


@pytest.mark.parametrize(("routes", "auth_service", "ingress_class", "expected"), [
    ("gateway", ("gpu-portal", "gpu-portal", 80), "nginx", []),
    ("gateway", None, "nginx", ["jobs.W002"]),
    ("ingress", None, "nginx", []),
    ("ingress", None, "internal-nginx", []),
    ("ingress", None, "traefik", ["jobs.W003"]),
])
def test_the_deploy_check_warns_of_endpoints_nothing_puts_behind_the_gate(settings, routes, auth_service, ingress_class,
                                                                          expected):
    from jobs.checks import endpoints_gated

    settings.PORTAL_ENDPOINT_ROUTES, settings.PORTAL_GATEWAY_AUTH_SERVICE = routes, auth_service
    settings.PORTAL_INGRESS_CLASS = ingress_class
    assert [message.id for message in endpoints_gated(None)] == expected
    settings.PORTAL_INGRESS_DOMAIN = ""  # no endpoints reachable from outside: nothing to gate
    assert endpoints_gated(None) == []
