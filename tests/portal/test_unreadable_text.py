"""A NUL character (code 0) in any part of a request, or a lone surrogate in a JSON body, is a
400 that names where it was, and nothing is written. PostgreSQL refuses a NUL even as a lookup's
parameter, and a lone surrogate cannot be encoded to send: before portal.parsers.text_refusal held
every request to this, a team slug with a NUL in the launch page's query string, the quota
preview or the API's template field was a 500 (the API fuzzer found the last), and so was a
surrogate in the template field. The suite runs on PostgreSQL, so these are the real refusal,
not SQLite's tolerance."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.test.client import MULTIPART_CONTENT

from jobs.models import Workload
from tenants.models import QuotaRequest
from tests.conftest import login
from tests.helpers import api

pytestmark = pytest.mark.django_db
NUL = "\x00"


@pytest.mark.parametrize(("url", "field"), [
    ("/launch/?team=%00&template={template}", "team"),
    ("/launch/?team=vision&template=%00", "template"),
    ("/launch/hint/?team=%00&template={template}&flavor=%00", "team"),
    ("/requests/preview/?team=%00&flavor=h100&units=2", "team"),
    ("/workloads/?owner=me&phase=%00", "phase"),
    ("/billing/statements/2026-11%00/", "path"),
])
def test_a_nul_in_a_pages_address_is_a_400_page_that_says_where(ready_team, member, training, url, field):
    response = login(member).get(url.format(template=training.pk))

    assert response.status_code == 400
    page = response.content.decode()
    assert f"“{field}” holds a NUL character (code 0)" in page and "The request could not be read" in page
    assert "Back to the portal" in page  # refused before the session is read: one link for the signed in and out


@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_a_nul_in_a_launch_form_is_refused_and_nothing_is_launched(ready_team, member, training, flavor, encoding):
    form = {"team": ready_team.slug, "template": str(training.pk), "flavor": flavor.slug + NUL, "units": "1"}
    client = login(member)
    if encoding == "urlencoded":
        response = client.post("/launch/", urlencode(form), content_type="application/x-www-form-urlencoded")
    else:
        response = client.post("/launch/", form)  # the test client's default: multipart

    assert response.status_code == 400
    assert "“flavor” holds a NUL character" in response.content.decode()
    assert not Workload.objects.exists()


def _api_launch(client, body, content_type):
    if content_type == "application/json":
        return client.post("/api/workloads/", json.dumps(body), content_type=content_type)
    if content_type == MULTIPART_CONTENT:
        return client.post("/api/workloads/", body)  # the test client's default: multipart
    return client.post("/api/workloads/", urlencode(body), content_type=content_type)


@pytest.mark.parametrize("content_type", ["application/json", MULTIPART_CONTENT, "application/x-www-form-urlencoded"])
@pytest.mark.parametrize(("change", "field"), [
    ({"template": NUL}, "template"),  # Schemathesis's find: a lookup by the template's slug
    ({"flavor": "h100-80gb" + NUL}, "flavor"),
    ({"name": "run" + NUL}, "name"),
])
def test_a_nul_in_an_api_body_is_a_400_in_json_naming_the_field(ready_team, member, training, flavor, content_type, change,
                                                                field):
    body = {"team": ready_team.slug, "template": str(training.pk), "flavor": flavor.slug, **change}
    response = _api_launch(api(member), body, content_type)

    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    sentence = f"“{field}” holds a NUL character (code 0), which no text in the portal may contain; remove it and send again."
    assert response.json()["errors"] == {field: [sentence]} and sentence in response.json()["message"]
    assert not Workload.objects.exists()


@pytest.mark.parametrize("parameters", [{"image_tag": "v1" + NUL}, {"image" + NUL: "v1"}, {"epochs": [NUL]}])
def test_a_nul_deep_in_a_json_body_a_key_included_is_refused_at_its_top_field(ready_team, member, training, flavor,
                                                                              parameters):
    body = {"team": ready_team.slug, "template": training.pk, "flavor": flavor.slug, "parameters": parameters}
    response = _api_launch(api(member), body, "application/json")

    assert response.status_code == 400 and list(response.json()["errors"]) == ["parameters"]
    assert not Workload.objects.exists()


def test_a_nul_in_an_api_query_is_a_400_in_json(ready_team, member):
    response = api(member).get("/api/workloads/", {"team": NUL})

    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert list(response.json()["errors"]) == ["team"]


def test_a_quota_request_form_with_a_nul_files_nothing(ready_team, member, flavor):
    client = login(member)
    response = client.post("/requests/new/", {"team": ready_team.slug, "flavor": flavor.slug, "units": "2",
                                              "reason": "more" + NUL})

    assert response.status_code == 400
    assert not QuotaRequest.objects.exists()


def test_a_session_cookie_with_a_nul_is_refused_before_the_session_is_looked_up(db):
    # The session store looks the cookie's key up in the database: on PostgreSQL a 500.
    client = Client()
    client.cookies["sessionid"] = "abcdefghij" + NUL
    response = client.get("/teams/")

    assert response.status_code == 400 and "“sessionid” holds a NUL character" in response.content.decode()


def test_a_form_too_large_to_read_gets_the_portals_400_page_in_words(member, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    response = login(member).post("/launch/", {f"field{n}": "x" for n in range(11)})

    assert response.status_code == 400
    assert "Something in it was malformed or too large" in response.content.decode()


@pytest.mark.parametrize(("body", "field"), [
    ('{"team": "vision", "template": "\\ud800", "flavor": "h100-80gb"}', "template"),
    ('{"team": "vision", "template": "1", "flavor": "h100-80gb", "parameters": {"image_tag": "v\\udfff"}}', "parameters"),
    ('{"team": "vision", "template": "1", "flavor": "h100-80gb", "name\\u0000": "x"}', "name\\x00"),
])
def test_a_lone_surrogate_or_a_nul_in_a_key_of_a_json_body_is_a_400_naming_the_field(ready_team, member, body, field):
    response = api(member).post("/api/workloads/", body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert not Workload.objects.exists()


def test_a_surrogate_pair_is_an_ordinary_character(ready_team, member, training, flavor):
    # json.dumps writes the rocket as the pair "\ud83d\ude80", which JSON reads back as one character.
    body = {"team": ready_team.slug, "template": training.pk, "flavor": flavor.slug, "name": "run-\U0001f680"}
    response = api(member).post("/api/workloads/", json.dumps(body), content_type="application/json")

    assert "surrogate" not in response.content.decode()
    assert response.status_code == 201 and Workload.objects.get().name == "run-\U0001f680"


def test_text_without_a_nul_still_passes_escaped_look_alikes_included(ready_team, member, training):
    # A backslash and a zero, or "\u0000" written out, are ordinary text.
    response = api(member).get("/api/workloads/", {"q": r"\0 \u0000 %00"})
    assert response.status_code == 200
    page = login(member).get(f"/launch/?team={ready_team.slug}&template={training.pk}")
    assert page.status_code == 200


def test_a_page_form_that_cannot_be_read_is_a_400_in_words(member):
    # A multipart body without its boundary: Django's parser raises; the page was an empty 400.
    response = login(member).post("/launch/", b"--x\r\nnot a part", content_type="multipart/form-data")

    assert response.status_code == 400
    assert "The form could not be read" in response.content.decode()
