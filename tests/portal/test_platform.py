"""What every deployment relies on: settings from the environment, health, metrics, logs, tokens."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from portal import tokens
from portal.errors import DomainError
from portal.models import ApiToken
from portal.observability import RequestIdFilter, request_id_var

ROOT = Path(__file__).resolve().parents[2]


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS"}}
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("missing", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "SITE_URL"])
def test_production_refuses_to_start_and_names_the_missing_value(missing, tmp_path):
    env = {
        "PORTAL_PRODUCTION": "1", "PORTAL_VAR_DIR": str(tmp_path), "SECRET_KEY": "x" * 60,
        "DATABASE_URL": "postgres://u@127.0.0.1:1/db", "REDIS_URL": "redis://127.0.0.1:1/0",
        "SITE_URL": "https://portal.example.com", "ALLOWED_HOSTS": "portal.example.com",
    }
    del env[missing]
    result = run_check(env)
    assert result.returncode != 0
    assert f"{missing} is not set" in result.stderr


def test_embedded_defaults_need_no_environment(tmp_path):
    result = run_check({"PORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr


def test_health_is_liveness_and_names_nothing_inside_the_site(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_favicon_ico_leads_anyone_to_the_icon_the_pages_name(client, db):
    from django.templatetags.static import static

    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == static("portal/favicon.svg")
    assert client.get(response["Location"]).status_code == 200


def test_metrics_count_requests_by_route_not_by_path(client, db):
    client.get("/healthz")
    body = client.get("/metrics").content.decode()
    assert 'portal_http_requests_total{method="GET",route="healthz",status="2xx"}' in body
    assert "portal_http_request_duration_seconds_bucket" in body


def test_metrics_with_a_token_set_answer_only_its_bearer(client, db, settings):
    settings.METRICS_TOKEN = "s3cret-metrics-token"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics").headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/metrics", headers={"Authorization": "Token s3cret-metrics-token"}).status_code == 401
    response = client.get("/metrics", headers={"Authorization": "Bearer s3cret-metrics-token"})
    assert response.status_code == 200
    assert "portal_http_requests_total" in response.content.decode()


def test_metrics_in_production_without_a_token_are_refused_even_from_loopback(client, db, settings):
    settings.PRODUCTION = True
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 403
    assert "METRICS_TOKEN" in response.content.decode()


def test_production_does_not_redirect_the_probes_or_the_metrics_scrape(tmp_path):
    # Both come pod to pod over plain HTTP; a redirect could not protect the scrape's bearer
    # token, which has already crossed by the time it answers. Everything else goes to HTTPS.
    code = (
        "from django.conf import settings; import re; "
        "print([p for p in ('healthz', 'readyz', 'metrics') "
        "if any(re.search(r, p) for r in settings.SECURE_REDIRECT_EXEMPT)])"
    )
    env = {
        "PORTAL_PRODUCTION": "1", "PORTAL_VAR_DIR": str(tmp_path), "SECRET_KEY": "x" * 60,
        "DATABASE_URL": "postgres://u@127.0.0.1:1/db", "REDIS_URL": "redis://127.0.0.1:1/0",
        "SITE_URL": "https://portal.example.com", "ALLOWED_HOSTS": "portal.example.com",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    clean = {k: v for k, v in os.environ.items() if k not in env}
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env={**clean, **env},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['healthz', 'readyz', 'metrics']"


def test_every_response_carries_a_request_id_and_keeps_a_sane_incoming_one(client, db):
    assert len(client.get("/healthz")["X-Request-ID"]) == 32
    assert client.get("/healthz", HTTP_X_REQUEST_ID="abc-123")["X-Request-ID"] == "abc-123"
    assert client.get("/healthz", HTTP_X_REQUEST_ID="bad id\n")["X-Request-ID"] != "bad id\n"


def test_production_logs_are_one_json_object_per_line_with_the_request_id(settings):
    from pythonjsonlogger.json import JsonFormatter

    config = settings.LOGGING["formatters"]["json"]
    formatter = JsonFormatter(config["fmt"], rename_fields=config["rename_fields"])
    record = logging.LogRecord("tenants", logging.INFO, __file__, 1, "approved %s", ("#12",), None)
    token = request_id_var.set("req-1")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    line = formatter.format(record)

    assert "\n" not in line
    parsed = json.loads(line)
    fields = (parsed["level"], parsed["logger"], parsed["message"], parsed["request_id"])
    assert fields == ("INFO", "tenants", "approved #12", "req-1")


@pytest.mark.django_db
def test_api_tokens_are_shown_once_stored_hashed_and_expire(member):
    token, secret = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    assert secret.startswith("gpp_") and secret not in token.digest
    assert ApiToken.objects.usable().get() == token
    token.expires_at = timezone.now() - dt.timedelta(seconds=1)
    token.save()
    assert not ApiToken.objects.usable().exists()
    assert token.status == "expired"


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "days", "message"), [
    ("", 30, "Give the token a name"), ("x", 0, "1 to 365 days"), ("x", 400, "1 to 365 days"),
])
def test_api_tokens_need_a_name_and_a_bounded_expiry(member, name, days, message):
    with pytest.raises(DomainError, match=message):
        tokens.api_token_create(user=member, name=name, expires_in_days=days)


PRODUCTION = {"PORTAL_PRODUCTION": "1", "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "portal.example.com",
              "SITE_URL": "https://portal.example.com", "DATABASE_URL": "postgres://u@127.0.0.1:1/db",
              "REDIS_URL": "redis://127.0.0.1:1/0"}


def run_deploy_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # Nor the test process's own switches: the browser tests set DJANGO_ALLOW_ASYNC_UNSAFE, which a
    # deployment check rightly refuses (async.E001).
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("PORTAL_", "DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"))}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                          env={**clean, **PRODUCTION, "PORTAL_VAR_DIR": str(tmp_path), **env},
                          capture_output=True, text=True, timeout=120, check=False)


def test_check_deploy_fails_when_workload_ingresses_would_answer_plain_http(tmp_path):
    result = run_deploy_check(tmp_path, PORTAL_INGRESS_DOMAIN="apps.example.com")

    assert result.returncode != 0
    assert "(portal.W001) Workloads get an Ingress under apps.example.com (PORTAL_INGRESS_DOMAIN) but no TLS" in result.stderr
    assert "PORTAL_INGRESS_TLS_SECRET" in result.stderr and "PORTAL_INGRESS_CLUSTER_ISSUER" in result.stderr


@pytest.mark.parametrize("tls", [{"PORTAL_INGRESS_TLS_SECRET": "wildcard-apps"},
                                 {"PORTAL_INGRESS_CLUSTER_ISSUER": "letsencrypt"}, {"PORTAL_INGRESS_DOMAIN": ""}])
def test_check_deploy_passes_with_tls_for_workload_ingresses_or_none_at_all(tmp_path, tls):
    result = run_deploy_check(tmp_path, **{"PORTAL_INGRESS_DOMAIN": "apps.example.com", **tls})

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
