"""What an API launch costs the database (issue 13): each question asked once, the number of
queries pinned so that it cannot creep back, and the reads kept for the rest of a request
forgotten by the services that change them."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import selectors, services
from jobs.models import ImageRegistry
from portal import tokens
from portal.memo import RequestMemoMiddleware
from tests.jobs.test_workload_api import launch_body

# The token and its user, the user's teams, the template named, the flavor, the team; the version
# with the template's availability and the flavor, the image allow-list, the team's guarantee,
# its active workloads, the flavor's price, its budget; the workload, its first transition and the
# audit event. The submission: the workload, the flavors it may run on, its row locked, queued
# (with submitted_at) and its transition. The answer: the workload's row, its transitions and its
# run intervals.
QUERIES_PER_API_LAUNCH = 22
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def portal_queries(captured: CaptureQueriesContext) -> list[str]:
    """The portal's own statements: the simulated cluster keeps its objects in the same database."""
    return [query["sql"] for query in captured.captured_queries
            if not query["sql"].startswith(TRANSACTION_CONTROL) and "simulated_cluster_" not in query["sql"]]


@pytest.mark.django_db(transaction=True)
def test_an_api_launch_asks_each_question_once_in_a_pinned_number_of_queries(ready_team, member, training, simulated):
    # Committed for real, so the eager submission runs inside the request, as in the benchmark.
    _, secret = tokens.api_token_create(user=member, name="train.sh", expires_in_days=30)
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert script.post("/api/workloads/", launch_body(), format="json").status_code == 201  # stamps the token's use

    with CaptureQueriesContext(connection) as captured:
        response = script.post("/api/workloads/", launch_body(), format="json")

    assert response.status_code == 201, response.json()
    assert (response.json()["phase"], response.json()["submitted_at"] is not None) == ("queued", True)
    assert [t["phase"] for t in response.json()["transitions"]] == ["submitting", "queued"]
    queries = portal_queries(captured)
    listing = "\n".join(queries)
    assert len(queries) <= QUERIES_PER_API_LAUNCH, listing
    assert sum('FROM "tenants_membership"' in sql for sql in queries) == 1, listing
    assert sum('FROM "jobs_imageregistry"' in sql for sql in queries) == 1, listing
    # The template's visibility: once for the caller (naming it), once for the team (launching in it).
    assert sum('"jobs_workloadtemplate_teams"' in sql for sql in queries) == 2, listing
    assert sum(sql.startswith('SELECT "portal_user"') for sql in queries) == 0, listing


def in_a_request(view: Any) -> Any:
    """Runs `view()` inside the request memo, as the middleware runs every request."""
    answers: list[Any] = []

    def get_response(request: HttpRequest) -> HttpResponse:
        answers.append(view())
        return HttpResponse()

    RequestMemoMiddleware(get_response)(HttpRequest())
    return answers[0]


def test_a_registry_added_or_removed_in_a_request_changes_the_allow_list_read_later_in_it(admin_user, settings):
    settings.PORTAL_IMAGE_REGISTRIES = []

    def add_then_remove() -> list[list[str]]:
        seen = [selectors.image_allow_list()]
        registry = services.image_registry_add(user=admin_user, prefix="registry.example.com")
        seen.append(selectors.image_allow_list())
        services.image_registry_remove(user=admin_user, registry=ImageRegistry.objects.get(pk=registry.pk))
        seen.append(selectors.image_allow_list())
        return seen

    assert in_a_request(add_then_remove) == [[], ["registry.example.com"], []]


def test_a_git_source_added_in_a_request_is_allowed_later_in_it(admin_user, settings):
    settings.PORTAL_GIT_SOURCES = []

    def add() -> list[list[str]]:
        before = selectors.git_sources()
        services.git_source_add(user=admin_user, prefix="github.com/acme")
        return [before, selectors.git_sources()]

    assert in_a_request(add) == [[], ["github.com/acme"]]


def test_a_template_unshared_in_a_request_is_withdrawn_for_what_is_submitted_later_in_it(
    ready_team, other_team, admin_user, member, training, flavor, django_capture_on_commit_callbacks
):
    workload = services.workload_launch(user=member, request=services.LaunchRequest(
        team=ready_team, template=training, flavor=flavor))

    def unshare() -> list[str]:
        before = services.template_withdrawn(workload)
        services.template_share(user=admin_user, template=training, is_global=False, teams=[other_team])
        return [before, services.template_withdrawn(workload)]

    before, after = in_a_request(unshare)
    assert before == ""
    assert after.startswith("The template “PyTorch training” is no longer available to vision")
