"""A notebook's token (finding 6): in the workload's Kubernetes Secret for its pod, only its hash
in the database, handed to its owner by POST and shown to nobody else anywhere."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from jobs import access, services, sync
from jobs.models import Workload, WorkloadKind
from portal import tokens
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _ingress(settings):
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"
    settings.PORTAL_INGRESS_CLUSTER_ISSUER = "letsencrypt"


@pytest.fixture
def notebook(ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks) -> Workload:
    template = services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                        flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, template, flavor)
    simulated.advance(1)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING, workload.reason
    return workload


@pytest.fixture
def teammate(team):
    user = UserFactory(username="tom")
    MembershipFactory(team=team, user=user)
    return user


def forms_of(token: str) -> list[str]:
    """The token as it could appear: itself, base64 (a Secret's data), its start (a truncated echo)."""
    return [token, base64.b64encode(token.encode()).decode(), token[:16]]


def assert_absent(token: str, body: str, where: str) -> None:
    for form in forms_of(token):
        assert form not in body, f"the notebook token appears in {where}"


def everything_they_can_read(user: Any, workload: Workload) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    pk = workload.pk
    pages = {
        "workload page": reverse("jobs:workload-detail", args=[pk]),
        "live fragment": reverse("jobs:workload-live", args=[pk]),
        "logs fragment": reverse("jobs:workload-logs", args=[pk]),
        "workload list": reverse("jobs:workload-list"),
        "team page": "/teams/vision/",
        "team audit": "/teams/vision/audit/",
        "audit": "/audit/",
        "dashboard": "/",
    }
    seen: dict[str, str] = {}
    for name, url in pages.items():
        seen[name] = client.get(url).content.decode()
        seen[f"{name} (htmx)"] = client.get(url, **HTMX).content.decode()
    rest = api(user)
    for name, url in {"API list": "/api/workloads/", "API detail": f"/api/workloads/{pk}/",
                      "API logs": f"/api/workloads/{pk}/logs/", "API why-waiting": f"/api/workloads/{pk}/why-waiting/",
                      "API audit": "/api/audit-events/", "API schema": "/api/schema/"}.items():
        seen[name] = rest.get(url).content.decode()
    if user.is_staff:
        seen["admin change page"] = client.get(f"/admin/jobs/workload/{pk}/change/").content.decode()
        seen["admin list"] = client.get("/admin/jobs/workload/").content.decode()
    return seen


def test_nobody_sees_the_token_on_any_page_fragment_or_api_answer(notebook, member, teammate, lead, admin_user,
                                                                  finance_user):
    token = access.notebook_token(notebook)
    for user in (member, teammate, lead, admin_user, finance_user):
        seen = everything_they_can_read(user, notebook)
        assert "Jupyter" in seen["workload page"], user.username  # the page did render for them
        for where, body in seen.items():
            assert_absent(token, body, f"{where} as {user.username}")


def test_only_the_owner_is_handed_the_token_and_only_in_the_answer_to_a_post(notebook, member, teammate, lead,
                                                                             admin_user, finance_user):
    token = access.notebook_token(notebook)
    url = reverse("jobs:notebook-token", args=[notebook.pk])
    for user in (teammate, lead, admin_user, finance_user):
        client = Client()
        client.force_login(user)
        by_api = api(user).post(f"/api/workloads/{notebook.pk}/notebook-token/")
        for response in (client.post(url), client.post(url, **HTMX), by_api):
            assert response.status_code == 403, user.username
            assert_absent(token, response.content.decode(), f"a refused hand-over to {user.username}")
        page = client.get(reverse("jobs:workload-detail", args=[notebook.pk])).content.decode()
        assert 'data-testid="reveal-token"' not in page and 'data-testid="open-notebook"' not in page
        assert "Only its owner, alice, can open this notebook." in page

    owner = Client()
    owner.force_login(member)
    page = owner.get(reverse("jobs:workload-detail", args=[notebook.pk])).content.decode()
    assert f'href="{reverse("jobs:workload-open", args=[notebook.pk])}"' in page and 'data-testid="reveal-token"' in page
    assert owner.get(url).status_code == 405  # a GET would put it in a URL's history
    fragment = owner.post(url, **HTMX)
    assert fragment.status_code == 200 and fragment["Cache-Control"] == "no-store"
    assert f'<code data-testid="notebook-token">{token}</code>' in fragment.content.decode()
    by_api = api(member).post(f"/api/workloads/{notebook.pk}/notebook-token/")
    assert by_api.status_code == 200 and by_api.json() == {"notebook_token": token}
    handed = AuditEvent.objects.filter(action="workload.notebook_token_revealed")
    assert handed.count() == 2 and all(token not in event.message for event in handed)


def test_a_read_only_api_token_cannot_ask_for_the_notebook_token(notebook, member):
    secret = tokens.api_token_create(user=member, name="ro", expires_in_days=1, scope="read")[1]
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    response = client.post(f"/api/workloads/{notebook.pk}/notebook-token/")
    assert response.status_code == 403
    assert_absent(access.notebook_token(notebook), response.content.decode(), "a read-only token's answer")


def test_the_database_holds_its_hash_and_the_cluster_holds_it_only_in_the_secret(notebook, simulated):
    token = access.notebook_token(notebook)
    assert notebook.notebook_token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM jobs_workload WHERE id = %s", [notebook.pk])
        row = cursor.fetchone()
    assert all(token not in str(value) for value in row)

    name, namespace = notebook.k8s_name, notebook.team.namespace
    secret = gateway().get(ObjectRef("v1", "Secret", f"{name}-token", namespace))
    assert secret is not None and base64.b64decode(secret["data"]["token"]).decode() == token
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
    # What members' `view` role reads: the StatefulSet, its pods, the Service and the Ingress.
    readable = [gateway().get(ObjectRef("apps/v1", "StatefulSet", name, namespace)),
                gateway().get(ObjectRef("v1", "Service", name, namespace)),
                gateway().get(ObjectRef("networking.k8s.io/v1", "Ingress", name, namespace)),
                *gateway().list("v1", "Pod", namespace=namespace, labels={"gpu-portal.io/workload": str(notebook.pk)})[0]]
    present = [obj for obj in readable if obj is not None]
    assert len(present) == len(readable) >= 4
    for obj in present:
        assert_absent(token, repr(obj), f"{obj['kind']} {obj['metadata']['name']}")


def test_stopping_a_notebook_deletes_its_secret_with_its_other_objects(notebook, member, django_capture_on_commit_callbacks):
    ref = ObjectRef("v1", "Secret", f"{notebook.k8s_name}-token", notebook.team.namespace)
    assert gateway().get(ref) is not None
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=notebook)
    assert gateway().get(ref) is None
    assert gateway().get(ObjectRef("networking.k8s.io/v1", "Ingress", notebook.k8s_name, notebook.team.namespace)) is None


def test_a_stopped_notebooks_token_is_not_handed_over(notebook, member, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=notebook)
    response = api(member).post(f"/api/workloads/{notebook.pk}/notebook-token/")
    assert response.status_code == 409
    assert_absent(access.notebook_token(notebook), response.content.decode(), "a stopped notebook's answer")


@pytest.mark.django_db(transaction=True)
def test_the_migration_replaces_each_stored_token_by_its_hash(member, ready_team, training, flavor):
    workload = launch(member, ready_team, training, flavor)
    executor = MigrationExecutor(connection)
    before, after = [("jobs", "0003_template_slug_unique_per_team")], [("jobs", "0004_workload_notebook_token_hashed")]
    executor.migrate(before)
    try:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE jobs_workload SET notebook_token = %s WHERE id = %s", ["old-token", workload.pk])
        executor.loader.build_graph()
        executor.migrate(after)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM jobs_workload WHERE id = %s", [workload.pk])
            columns = [column[0] for column in cursor.description]
            row = dict(zip(columns, cursor.fetchone(), strict=True))
    finally:  # the later migrations back, for the tests that follow
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert "notebook_token" not in columns
    assert row["notebook_token_sha256"] == hashlib.sha256(b"old-token").hexdigest()


def test_a_notebook_from_before_the_change_is_told_to_relaunch(notebook, member):
    Workload.objects.filter(pk=notebook.pk).update(notebook_token_sha256=hashlib.sha256(b"old-token").hexdigest())
    response = api(member).post(f"/api/workloads/{notebook.pk}/notebook-token/")
    assert response.status_code == 409 and "relaunch it" in response.json()["message"]
