"""Finance sees what a workload costs, not what it runs (docs/roles.md): its name, team, owner,
flavor, units, times, phase and cost, but not its logs (the page's panel, the download, the API),
its launch parameters (the page, the API) or a notebook's token. The team and platform admins
keep them; another team's workload stays 404 for everyone outside it."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs import services, sync
from jobs.models import Workload, WorkloadKind
from jobs.rules import LOGS_REFUSAL
from portal.models import AuditEvent
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
SECRET_VALUE = "s3cret-dataset-path"


@pytest.fixture
def running(ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks) -> Workload:
    """A member's training run, past its first pod, launched with a value nobody outside the team should read."""
    template = services.template_create(
        user=admin_user, slug="train", name="Training", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="pytorch/pytorch:2.5", command=["python", "train.py"],
        parameters=[{"name": "data", "type": "env", "names": ["DATA_PATH"]}])
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, template, flavor, name="detector",
                          parameters={"data": {"DATA_PATH": SECRET_VALUE}})
    simulated.advance(1)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    return workload


def page(client: Any, name: str, workload: Workload, **extra: Any) -> Any:
    return client.get(reverse(name, args=[workload.pk]), **extra)


def test_finance_reads_a_workloads_cost_facts_on_its_page_but_not_its_parameters_or_logs(running, finance_user, as_user):
    response = page(as_user(finance_user), "jobs:workload-detail", running)

    assert response.status_code == 200
    html = response.content.decode()
    for fact in ("detector", "alice", "H100 80GB", "Used so far", 'data-testid="phase"'):
        assert fact in html, fact
    assert SECRET_VALUE not in html and "DATA_PATH" not in html
    assert 'data-testid="parameters-withheld"' in html
    assert 'id="workload-logs"' not in html and reverse("jobs:workload-logs", args=[running.pk]) not in html


@pytest.mark.parametrize("who", ["member", "lead", "admin_user"])
def test_the_team_and_platform_admins_still_read_parameters_and_are_offered_the_logs(request, running, as_user, who):
    html = page(as_user(request.getfixturevalue(who)), "jobs:workload-detail", running).content.decode()

    assert SECRET_VALUE in html and 'data-testid="parameters-withheld"' not in html
    assert 'data-testid="show-logs"' in html


@pytest.mark.parametrize(("name", "extra"), [
    ("jobs:workload-logs", HTMX), ("jobs:workload-logs", {}), ("jobs:workload-logs-download", {}),
])
def test_finance_is_refused_the_logs_fragment_page_and_download(running, finance_user, admin_user, as_user, name, extra):
    refused = page(as_user(finance_user), name, running, **extra)
    allowed = page(as_user(admin_user), name, running, **extra)

    assert refused.status_code == 403
    assert "[simulated]" not in refused.content.decode()
    assert allowed.status_code == 200 and "[simulated]" in allowed.content.decode()


def test_finance_reads_a_workload_through_the_api_without_its_parameters_or_logs(running, finance_user, member):
    seen = api(finance_user).get(f"/api/workloads/{running.pk}/")
    logs = api(finance_user).get(f"/api/workloads/{running.pk}/logs/")

    assert seen.status_code == 200
    body = seen.json()
    assert (body["name"], body["team"], body["owner"], body["flavor"], body["units"], body["phase"]) == (
        "detector", "vision", "alice", "h100-80gb", 1, "running")
    assert body["created_at"] and body["intervals"]
    assert body["parameters"] is None and SECRET_VALUE not in seen.content.decode()
    assert logs.status_code == 403 and logs.json() == {"message": LOGS_REFUSAL, "errors": {}}
    assert api(member).get(f"/api/workloads/{running.pk}/").json()["parameters"]["data"] == {"DATA_PATH": SECRET_VALUE}


def test_the_workload_list_gives_finance_every_teams_rows_with_no_parameters(running, finance_user):
    rows = api(finance_user).get("/api/workloads/").json()["results"]

    assert [(row["name"], row["team"]) for row in rows] == [("detector", "vision")]
    assert "parameters" not in rows[0]


def test_finance_is_never_handed_a_notebooks_token(ready_team, member, finance_user, admin_user, flavor, as_user,
                                                    django_capture_on_commit_callbacks):
    template = services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                        flavors=[flavor], image="jupyter/pytorch:2.5", port=8888, storage_gib=10)
    with django_capture_on_commit_callbacks(execute=True):
        notebook = launch(member, ready_team, template, flavor, name="nb")

    by_api = api(finance_user).post(f"/api/workloads/{notebook.pk}/notebook-token/")
    by_page = as_user(finance_user).post(reverse("jobs:notebook-token", args=[notebook.pk]), **HTMX)
    detail = api(finance_user).get(f"/api/workloads/{notebook.pk}/").json()

    assert by_api.status_code == 403 and "notebook_token" not in by_api.json()
    assert 'data-testid="notebook-token"' not in by_page.content.decode()
    assert detail["notebook_token_sha256"] is None
    assert not AuditEvent.objects.filter(action="workload.notebook_token_revealed").exists()


def test_another_teams_workload_stays_404_on_the_pages_the_logs_and_the_api(running, outsider, as_user):
    client = as_user(outsider)
    for name in ("jobs:workload-detail", "jobs:workload-logs", "jobs:workload-logs-download"):
        assert page(client, name, running).status_code == 404, name
    assert api(outsider).get(f"/api/workloads/{running.pk}/logs/").status_code == 404


def test_a_finance_user_who_is_also_in_the_team_reads_its_logs_as_a_member(running, finance_user, team, as_user):
    from tenants.models import Membership
    from tests.factories import MembershipFactory

    MembershipFactory(team=team, user=finance_user, role=Membership.Role.MEMBER)

    assert page(as_user(finance_user), "jobs:workload-logs", running, **HTMX).status_code == 200
    assert api(finance_user).get(f"/api/workloads/{running.pk}/").json()["parameters"]["data"] == {"DATA_PATH": SECRET_VALUE}

