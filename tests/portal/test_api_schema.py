"""The OpenAPI schema generates cleanly and documents every endpoint; the docs page is self-hosted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from portal.adapters import FLAG_PATTERN

ROOT = Path(__file__).resolve().parents[2]

ENDPOINTS = {
    "/api/teams/": {"get", "post"},
    "/api/teams/{slug}/": {"get", "patch", "delete"},
    "/api/teams/{slug}/cluster/": {"get"},
    "/api/memberships/": {"get", "post"},
    "/api/memberships/{id}/": {"get", "patch", "delete"},
    "/api/flavors/": {"get", "post"},
    "/api/flavors/{id}/": {"get", "patch"},
    "/api/quota-requests/": {"get", "post"},
    "/api/quota-requests/{id}/": {"get"},
    "/api/quota-requests/{id}/approve/": {"post"},
    "/api/quota-requests/{id}/reject/": {"post"},
    "/api/quota-requests/{id}/cancel/": {"post"},
    "/api/grants/": {"get"},
    "/api/grants/{id}/": {"get"},
    "/api/audit-events/": {"get"},
    "/api/audit-events/{id}/": {"get"},
    "/api/notifications/": {"get"},
    "/api/tokens/": {"get", "post"},
    "/api/templates/": {"get", "post"},
    "/api/templates/{id}/": {"get", "patch"},
    "/api/templates/{id}/share/": {"post"},
    "/api/workloads/": {"get", "post"},
    "/api/workloads/{id}/": {"get"},
    "/api/workloads/{id}/stop/": {"post"},
    "/api/workloads/{id}/relaunch/": {"post"},
    "/api/workloads/{id}/scale/": {"post"},
    "/api/workloads/{id}/logs/": {"get"},
    "/api/workloads/{id}/why-waiting/": {"get"},
    "/api/workloads/{id}/keys/": {"get", "post"},
    "/api/workloads/{id}/keys/{key_id}/revoke/": {"post"},
    "/api/image-registries/": {"get", "post"},
    "/api/image-registries/{id}/": {"get", "delete"},
    "/api/volumes/": {"get", "post"},
    "/api/volumes/{id}/": {"get", "patch", "delete"},
    "/api/credentials/": {"get", "post"},
    "/api/credentials/{id}/": {"get", "delete"},
    "/api/credentials/{id}/rotate/": {"post"},
    "/api/nodes/": {"get"},
}
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def spectacular(out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`manage.py spectacular`, run as CI runs it: warnings are counted per process."""
    env = {**os.environ, "PORTAL_VAR_DIR": str(out.parent)}
    return subprocess.run(
        [sys.executable, "manage.py", "spectacular", "--validate", *flags, "--file", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("schema") / "schema.yaml"
    result = spectacular(out)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(out.read_text())


def test_the_schema_generates_and_validates_without_a_single_warning(tmp_path):
    result = spectacular(tmp_path / "schema.yaml", "--fail-on-warn")

    assert result.returncode == 0, result.stderr


def test_the_schema_lists_every_endpoint_with_exactly_its_methods(schema):
    documented = {path: set(ops) & HTTP_METHODS for path, ops in schema["paths"].items()}

    for path, methods in ENDPOINTS.items():
        assert documented.get(path) == methods, path


def test_requests_and_grants_offer_no_way_to_overwrite_them(schema):
    assert set(schema["paths"]["/api/quota-requests/{id}/"]) & {"put", "patch", "delete"} == set()
    assert set(schema["paths"]["/api/grants/{id}/"]) & {"put", "patch", "delete"} == set()


def test_action_bodies_and_filters_are_documented(schema):
    approve = schema["paths"]["/api/quota-requests/{id}/approve/"]["post"]
    body = approve["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/QuotaApprovalRequest")
    filters = {p["name"] for p in schema["paths"]["/api/quota-requests/"]["get"]["parameters"]}
    assert {"team", "status", "mine", "page", "page_size"} <= filters
    lines = schema["components"]["schemas"]["QuotaRequestCreateRequest"]["properties"]["lines"]
    assert lines["items"]["$ref"].endswith("/QuotaLineInputRequest")


def test_token_authentication_is_described(schema):
    schemes = schema["components"]["securitySchemes"]
    assert any(s.get("type") == "http" and s.get("scheme") == "bearer" or s.get("in") == "header" for s in schemes.values())


def test_the_schema_is_served_to_logged_in_people(as_user, member):
    response = as_user(member).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    assert "/api/quota-requests/{id}/approve/" in response.json()["paths"]


def test_the_schema_is_not_served_to_anonymous_visitors(client, db):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 401
    assert response.json() == {"message": "Authentication credentials were not provided.", "errors": {}}
    assert "/api/quota-requests/" not in response.content.decode()


def test_the_schema_is_served_to_an_api_token(member):
    from rest_framework.test import APIClient

    from portal import tokens

    _, secret = tokens.api_token_create(user=member, name="ci", expires_in_days=1)
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json",
                               HTTP_AUTHORIZATION=f"Token {secret}")

    assert response.status_code == 200 and "/api/workloads/" in response.json()["paths"]


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/", "/api/docs/?script="])
def test_the_docs_pages_send_anonymous_visitors_to_sign_in_and_back(client, db, path):
    response = client.get(path)

    assert response.status_code == 302
    assert response.url == f"/login/?next={quote(path)}"


def test_the_docs_page_renders_swagger_ui_from_local_static_files(as_user, member):
    response = as_user(member).get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css" in html
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com"):
        assert cdn not in html


@pytest.mark.parametrize("path", ["/api/memberships/", "/api/flavors/", "/api/quota-requests/", "/api/grants/",
                                  "/api/audit-events/", "/api/templates/", "/api/workloads/"])
def test_every_list_documents_its_team_filter_from_the_filterset(schema, path):
    team = next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "team")

    assert team["in"] == "query" and team["schema"] == {"type": "string"} and team["description"]


def test_flags_are_documented_as_exactly_the_words_they_read(schema):
    flags = {(path, p["name"]): p["schema"] for path in ("/api/quota-requests/", "/api/grants/", "/api/notifications/")
             for p in schema["paths"][path]["get"]["parameters"] if p["name"] in {"mine", "active", "unread"}}

    assert set(flags) == {("/api/quota-requests/", "mine"), ("/api/grants/", "active"), ("/api/notifications/", "unread")}
    assert all(flag == {"type": "string", "pattern": FLAG_PATTERN} for flag in flags.values())


def test_every_operation_has_a_summary_for_swagger_ui(schema):
    missing = [f"{method.upper()} {path}" for path, operations in schema["paths"].items()
               for method, operation in operations.items() if not operation.get("summary")]
    assert missing == []
    assert schema["paths"]["/api/quota-requests/{id}/approve/"]["post"]["summary"] == "Approve a quota request"
    assert schema["paths"]["/api/workloads/"]["post"]["summary"] == "Launch a workload"


def test_an_operation_without_a_written_summary_still_gets_one():
    from portal.schema import add_summaries

    result = add_summaries({"paths": {"/api/teams/{slug}/archive/": {"post": {"operationId": "teams_archive_create"}},
                                      "/api/things/": {"get": {"operationId": "things_list"}}}})
    assert result["paths"]["/api/teams/{slug}/archive/"]["post"]["summary"] == "Archive (teams)"
    assert result["paths"]["/api/things/"]["get"]["summary"] == "List things"
