"""The adapter kit every app's pages and API endpoints share."""

from __future__ import annotations

import pytest

from portal.adapters import error_sentences, whole_number
from portal.notifications import notify
from tests.helpers import api


def test_errors_read_as_sentences_named_by_their_field_unless_asked_not_to():
    detail = {"team": ["There is no team “x” that you can see."], "non_field_errors": ["Say why."],
              "lines": [{"flavor": ["flavor 9 does not exist"]}, {}]}

    assert error_sentences(detail) == ["team: There is no team “x” that you can see.", "Say why.",
                                       "flavor: flavor 9 does not exist"]
    assert error_sentences(detail["lines"], keyed=False) == ["flavor 9 does not exist"]


def test_notifications_filter_on_unread_and_refuse_a_flag_that_is_not_one(member):
    first, second = notify(recipients=[member], message="one", url="/")[0], notify(recipients=[member], message="two", url="/")[0]
    api(member).post(f"/api/notifications/{first.pk}/read/")

    def ids(**params: str) -> set[int]:
        return {row["id"] for row in api(member).get("/api/notifications/", params).json()["results"]}

    assert (ids(unread="1"), ids(unread="yes"), ids(unread="0"), ids()) == ({second.pk}, {second.pk}, {first.pk, second.pk},
                                                                             {first.pk, second.pk})
    refused = api(member).get("/api/notifications/", {"unread": "maybe"})
    assert (refused.status_code, refused.json()["message"]) == (400, "unread: unread is 1 or 0, not “maybe”.")


@pytest.mark.parametrize("path", ["/api/quota-requests/", "/api/workloads/"])
def test_a_value_that_is_not_a_choice_is_a_400_that_names_the_choices(member, path):
    response = api(member).get(path, {"status" if "quota" in path else "phase": "done"})

    assert response.status_code == 400
    assert "is not a" in response.json()["message"] and "choose one of" in response.json()["message"]


@pytest.mark.parametrize("depth", [65, 100_000])
def test_a_json_body_nested_too_deeply_is_a_400_with_a_sentence(member, depth):
    body = "[" * depth + "]" * depth

    response = api(member).post("/api/quota-requests/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["message"].startswith("The JSON is nested too deeply")


def test_a_json_body_nested_reasonably_is_read_as_before(member):
    body = '{"team": "vision", "lines": [' + "[" * 60 + "]" * 60 + "]}"

    response = api(member).post("/api/quota-requests/", body, content_type="application/json")

    assert response.status_code == 400
    assert "nested" not in response.json()["message"]


@pytest.mark.parametrize(("text", "number"), [("7", 7), (" 12 ", 12), ("²", None), ("١٢", None), ("１２", None), ("-1", None),
                                              ("+1", None), ("1_000", None), ("", None), (None, None), ("9" * 19, None)])
def test_a_whole_number_is_written_in_ascii_digits_only(text, number):
    assert whole_number(text) == number
