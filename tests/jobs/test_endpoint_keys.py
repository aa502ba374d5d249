"""Keys for programs (jobs/endpoint_keys.py): a member makes a key for a server the team serves, a
program sends it as a Bearer token, and the gate lets it through to that server only.

Invariants: a key is shown once and kept only as its SHA-256; it opens its own server and no
other; a revoked key, or one of a server that has ended, is refused at the next request; the
server never sees the key; only the team's members make and revoke keys (a notebook, opened by its
owner alone, takes none); another team's server is 404; every key made and revoked is audited."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from jobs import endpoint_keys, services
from jobs.models import EndpointKey, Workload, WorkloadKind
from portal.errors import DomainError, StateConflict
from portal.models import AuditEvent
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import api, launch
from tests.jobs.test_workload_gate import gate

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _ingress(settings):
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"


@pytest.fixture
def inference_template(admin_user, flavor):
    return services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE,
                                    flavors=[flavor], image="vllm/vllm-openai:0.6", port=8000, parameters=[])


@pytest.fixture
def server(ready_team, member, inference_template, flavor) -> Workload:
    return launch(member, ready_team, inference_template, flavor)


@pytest.fixture
def notebook(ready_team, member, admin_user, flavor) -> Workload:
    template = services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                        flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])
    return launch(member, ready_team, template, flavor)


@pytest.fixture
def teammate(team):
    user = UserFactory(username="tom")
    MembershipFactory(team=team, user=user)
    return user


def test_a_key_opens_its_server_to_a_program_and_nothing_else(server, member, notebook, ready_team, flavor,
                                                             inference_template):
    key, secret = endpoint_keys.key_create(actor=member, workload=server, name="eval-nightly")

    assert secret.startswith("gpk_") and key.shown == secret[:12]
    assert EndpointKey.objects.get().sha256 == endpoint_keys.digest(secret) and secret not in repr(
        list(EndpointKey.objects.values()))
    through = gate(server.pk, authorization=f"Bearer {secret}", method="POST")
    assert through.status_code == 200 and through["X-Portal-User"] == "key:eval-nightly"
    assert "Authorization" not in through  # the server never sees the key
    other = launch(member, ready_team, inference_template, flavor, name="other-server")
    assert gate(other.pk, authorization=f"Bearer {secret}").status_code == 401
    assert gate(server.pk, authorization="Bearer gpk_not-a-key").status_code == 401
    event = AuditEvent.objects.get(action="endpoint_key.created")
    assert event.team_id == ready_team.pk and f"alice made the key {key.shown}… (eval-nightly)" in event.message


def test_a_revoked_key_and_a_key_of_an_ended_server_are_refused(server, member, teammate):
    key, secret = endpoint_keys.key_create(actor=member, workload=server, name="ci")
    endpoint_keys.key_revoke(actor=teammate, key=key)
    assert gate(server.pk, authorization=f"Bearer {secret}").status_code == 401
    with pytest.raises(StateConflict, match="already revoked"):
        endpoint_keys.key_revoke(actor=member, key=key)
    assert AuditEvent.objects.filter(action="endpoint_key.revoked", data__name="ci").exists()

    _, live = endpoint_keys.key_create(actor=member, workload=server, name="batch")
    Workload.objects.filter(pk=server.pk).update(phase=Workload.Phase.STOPPED)
    assert gate(server.pk, authorization=f"Bearer {live}").status_code == 401


def test_only_the_teams_members_make_keys_and_a_notebook_takes_none(server, notebook, member, outsider, finance_user):
    for someone in (outsider, finance_user):
        with pytest.raises(PermissionDenied):
            endpoint_keys.key_create(actor=someone, workload=server, name="x")
    with pytest.raises(PermissionDenied):
        endpoint_keys.key_create(actor=member, workload=notebook, name="x")  # opened by its owner alone, in a browser
    with pytest.raises(DomainError, match="Name the key"):
        endpoint_keys.key_create(actor=member, workload=server, name="  ")
    assert not EndpointKey.objects.exists()


def test_the_page_shows_a_new_key_once_and_revokes_it(server, member):
    client = login(member)
    page = client.get(reverse("jobs:workload-detail", args=[server.pk])).content.decode()
    assert "Keys for programs" in page
    made = client.post(reverse("jobs:endpoint-key-create", args=[server.pk]), {"name": "eval-nightly"},
                       HTTP_HX_REQUEST="true")
    key = EndpointKey.objects.get()
    secret = made.content.decode().split('data-testid="new-key-secret">')[1].split("<")[0]
    assert endpoint_keys.digest(secret) == key.sha256 and made["Cache-Control"] == "no-store"
    again = client.get(reverse("jobs:workload-detail", args=[server.pk])).content.decode()
    assert secret not in again and f"{key.shown}…" in again
    client.post(reverse("jobs:endpoint-key-revoke", args=[server.pk, key.pk]), HTTP_HX_REQUEST="true")
    key.refresh_from_db()
    assert not key.active


def test_the_api_makes_lists_and_revokes_keys_and_another_team_gets_404(server, member, outsider):
    caller = api(member)
    made = caller.post(f"/api/workloads/{server.pk}/keys/", {"name": "eval"}, format="json")
    assert made.status_code == 201 and made.json()["key"].startswith("gpk_")
    listed = caller.get(f"/api/workloads/{server.pk}/keys/").json()
    assert [k["name"] for k in listed] == ["eval"] and "key" not in listed[0]
    revoked = caller.post(f"/api/workloads/{server.pk}/keys/{made.json()['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_by"] == "alice"
    theirs = api(outsider)
    assert theirs.get(f"/api/workloads/{server.pk}/keys/").status_code == 404
    assert theirs.post(f"/api/workloads/{server.pk}/keys/", {"name": "x"}, format="json").status_code == 404
    assert login(outsider).post(reverse("jobs:endpoint-key-create", args=[server.pk]), {"name": "x"}).status_code == 404
