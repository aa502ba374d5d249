"""What an API launch costs the database (issue 13): the number of queries pinned so that it
cannot creep back."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal import tokens
from portal.kube.simulated.store import WRITE_LOCK
from tests.jobs.test_workload_api import launch_body

# The token and its user, the user's teams, the template named, the flavor, the team; the version
# with the template's availability and the flavor, the image allow-list, the team's guarantee,
# its active workloads, the flavor's price, its budget; the workload, its first transition and the
# audit event. The submission (eager here, in a worker in production): the workload, the
# template's availability and the image allow-list asked again (a worker may run it long after
# the launch), the flavors it may run on, its row locked, queued (with submitted_at) and its
# transition. The answer: the workload's row, its transitions and its run intervals.
QUERIES_PER_API_LAUNCH = 24
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def portal_queries(captured: CaptureQueriesContext) -> list[str]:
    """The portal's own statements: the simulated cluster keeps its objects in the same database,
    and takes its write lock there."""
    return [query["sql"] for query in captured.captured_queries
            if not query["sql"].startswith(TRANSACTION_CONTROL) and "simulated_cluster_" not in query["sql"]
            and f"pg_advisory_xact_lock({WRITE_LOCK})" not in query["sql"]]


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
    # Once in the launch's checks and once in its submission.
    assert sum('FROM "jobs_imageregistry"' in sql for sql in queries) == 2, listing
    # The template's visibility: for the caller (naming it), for the team (launching in it) and
    # again in the submission.
    assert sum('"jobs_workloadtemplate_teams"' in sql for sql in queries) == 3, listing
    assert sum(sql.startswith('SELECT "portal_user"') for sql in queries) == 0, listing

