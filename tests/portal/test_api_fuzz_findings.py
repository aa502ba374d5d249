"""What Schemathesis found in the API (tests/portal/test_api_fuzz.py), each kept fixed here."""

from __future__ import annotations

import json

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.renderers import JSONRenderer

from tests.helpers import api


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return json.loads(JSONRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


@pytest.mark.parametrize("path", ["/api/workloads/abc/", "/api/billing/budgets/%C3%A9/", "/api/nothing-here/"])
def test_an_api_url_nothing_serves_answers_the_json_error_not_an_html_page(member, path):
    response = api(member).get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"message": "Not found, or not visible to you.", "errors": {}}


def test_a_page_url_nothing_serves_is_still_a_page(client, db):
    assert client.get("/nothing-here/")["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(("query", "sentence"), [
    ({"page_size": "abc"}, "page_size must be a whole number from 1 to 200, not “abc”."),
    ({"page_size": "0"}, "page_size must be a whole number from 1 to 200, not “0”."),
    ({"page": "-3"}, "page must be a whole number from 1, not “-3”."),
    ({"page": "²"}, "page must be a whole number from 1, not “²”."),
])
def test_a_page_or_page_size_that_is_not_a_whole_number_is_a_400_not_a_silent_first_page(member, query, sentence):
    response = api(member).get("/api/audit-events/", query)

    assert response.status_code == 400
    assert response.json()["message"].endswith(sentence)


def test_a_page_size_over_the_bound_is_still_read_as_the_bound(member):
    assert api(member).get("/api/audit-events/", {"page_size": "500"}).status_code == 200


def test_only_the_answer_to_create_promises_a_token_secret(schema):
    tokens = schema["paths"]["/api/tokens/"]
    created = tokens["post"]["responses"]["201"]["content"]["application/json"]["schema"]["$ref"]
    listed = tokens["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    components = schema["components"]["schemas"]
    assert "secret" in components[created.rsplit("/", 1)[1]]["required"]
    assert "secret" not in json.dumps(components[listed.rsplit("/", 1)[1]])
    assert "secret" not in components["ApiToken"]["properties"]


def test_every_operation_documents_the_error_format_and_bodies_refuse_unknown_fields(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"400", "401", "403", "404"} <= codes, (method, path)
            assert operation["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    assert schema["components"]["schemas"]["WorkloadLaunchRequest"]["additionalProperties"] is False


def test_an_empty_choice_filter_is_documented_as_the_any_value_the_api_reads_it_as(schema, member, team):
    (status,) = [p for p in schema["paths"]["/api/quota-requests/"]["get"]["parameters"] if p["name"] == "status"]
    assert "" in status["schema"]["enum"] and "pending" in status["schema"]["enum"]
    assert api(member).get("/api/quota-requests/?status=").status_code == 200


def test_a_template_versions_blank_idle_action_is_in_its_schema(schema):
    version = schema["components"]["schemas"]["TemplateVersion"]["properties"]["idle_action"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in version["oneOf"]


@pytest.mark.parametrize(("value", "valid"), [
    ("", True), ("1", True), ("True", True), ("no", True), ("FALSE", True),
    ("2", False), (" 1", False), ("truee", False), ("on", False),
])
def test_a_flag_is_answered_exactly_when_its_schema_says_it_is_valid(schema, lead, ready_team, value, valid):
    # The fuzzer's find: `?active=` was answered (as "either") while the schema called the flag a
    # boolean, which an empty value is not; " 1" was answered while no schema could say so.
    (active,) = [p for p in schema["paths"]["/api/grants/"]["get"]["parameters"] if p["name"] == "active"]
    response = api(lead).get("/api/grants/", {"active": value})

    assert jsonschema.Draft202012Validator(active["schema"]).is_valid(value) is valid
    assert response.status_code == (200 if valid else 400)
    if not valid:
        assert response.json()["errors"] == {"active": [f"active is 1 or 0, not “{value}”."]}
