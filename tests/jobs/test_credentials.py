"""A team's credentials: S3 keys, git deploy keys and registry logins members keep for the team,
written once into a Secret in its namespace and mounted by name where a template asks for one.

Invariants: a value is never kept by the portal nor shown again (not by the page, a refusal, the
API, the audit trail or the database); what is made is the team's Secret of the kind's type, with
a name no one else chooses; rotating replaces every value; a credential an active workload mounts
is not deleted; a call that fails half way leaves nothing the repair pass does not remove; another
team's credential is 404 and finance sees none."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.urls import reverse

from jobs import credentials, kinds, services
from jobs.models import TeamCredential, Workload, WorkloadKind
from portal.errors import DomainError, StateConflict
from portal.kube import KubeError, ObjectRef, gateway, reset_gateway
from portal.kube.counting import CountingGateway
from portal.models import AuditEvent
from tenants import manifests
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
S3 = {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": SECRET, "endpoint": "https://minio.example.com",
      "region": "eu-west-1"}
PRIVATE_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
               "QyNTUxOQAAACBUNIQUEKEYMATERIALNOTAREALKEYBUTSHAPEDLIKEONE00000000\n-----END OPENSSH PRIVATE KEY-----\n")
REGISTRY = {"server": "registry.example.com:5000", "username": "robot$ci", "password": "s3cr3t-t0ken"}


@pytest.fixture
def ready_team(team, flavor, simulated):
    return make_ready(team, flavor)


@pytest.fixture
def with_keys(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="with-keys", name="Training with keys", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", command=["python", "train.py"], default_units=1, max_units=4,
        parameters=[{"name": "bucket", "type": "credential", "credential_kind": "s3"},
                    {"name": "deploy_key", "type": "credential", "credential_kind": "git-ssh", "mount_path": "/keys/git"},
                    {"name": "pull", "type": "credential", "credential_kind": "registry"}])


def secret_of(credential: TeamCredential) -> Any:
    return gateway().get(ObjectRef("v1", "Secret", credential.secret_name, credential.team.namespace))


def decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def everything_stored() -> str:
    """Every row of the portal's tables that could hold a value, as text."""
    with connection.cursor() as cursor:
        texts = []
        for table in ("jobs_teamcredential", "portal_auditevent"):
            cursor.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed table names
            texts += [repr(row) for row in cursor.fetchall()]
    return "\n".join(texts)


# --- Keeping one ---------------------------------------------------------------------------------


def test_an_s3_key_becomes_the_teams_secret_and_its_values_are_kept_nowhere_else(ready_team, member):
    credential = credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)

    secret = secret_of(credential)
    assert secret["type"] == "Opaque" and credential.secret_name.startswith("cred-datalake-")
    assert decoded(secret) == {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET,
                               "AWS_ENDPOINT_URL": "https://minio.example.com", "AWS_DEFAULT_REGION": "eu-west-1"}
    assert manifests.owned_by_team(secret, uid=str(ready_team.uid))
    assert secret["metadata"]["labels"][manifests.CREDENTIAL_LABEL] == "datalake"
    credential.refresh_from_db()
    assert credential.applied and credential.hint == "key …MPLE at minio.example.com, eu-west-1"
    assert SECRET not in everything_stored()
    event = AuditEvent.objects.get(action="credential.created")
    assert event.team_id == ready_team.pk and "alice added the S3 access key datalake" in event.message


def test_a_deploy_key_and_a_registry_login_are_secrets_of_the_types_their_consumers_read(ready_team, member):
    key = credentials.credential_create(actor=member, team=ready_team, name="repo", kind="git-ssh",
                                        values={"private_key": PRIVATE_KEY.replace("\n", "\r\n"),
                                                "known_hosts": "github.com ssh-ed25519 AAAAC3Nza"})
    login = credentials.credential_create(actor=member, team=ready_team, name="pull", kind="registry", values=REGISTRY)

    assert secret_of(key)["type"] == "kubernetes.io/ssh-auth"
    assert decoded(secret_of(key)) == {"ssh-privatekey": PRIVATE_KEY, "known_hosts": "github.com ssh-ed25519 AAAAC3Nza\n"}
    assert key.hint == "OpenSSH key, with known hosts"
    assert secret_of(login)["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(decoded(secret_of(login))[".dockerconfigjson"])["auths"]
    assert auths == {"registry.example.com:5000": {
        "username": "robot$ci", "password": "s3cr3t-t0ken", "auth": base64.b64encode(b"robot$ci:s3cr3t-t0ken").decode()}}
    assert login.hint == "robot$ci at registry.example.com:5000"
    assert "s3cr3t-t0ken" not in everything_stored() and "UNIQUEKEYMATERIAL" not in everything_stored()


@pytest.mark.parametrize(("kind", "values", "field", "words"), [
    ("s3", {"access_key_id": "AKIA"}, "secret_access_key", "Secret access key: is needed."),
    ("s3", {**S3, "secret_access_key": "has space"}, "secret_access_key", "holds spaces or characters other than"),
    ("s3", {**S3, "endpoint": "ftp://x"}, "endpoint", "must be an http(s) URL"),
    ("s3", {**S3, "private_key": PRIVATE_KEY}, "private_key",
     "S3 access key takes access_key_id, secret_access_key, endpoint, region; not private_key"),
    ("git-ssh", {"private_key": "ssh-ed25519 AAAA public half"}, "private_key", "paste the whole private key"),
    ("git-ssh", {"private_key": PRIVATE_KEY.replace("b3Bl", "Proc-Type: 4,ENCRYPTED\nb3Bl")}, "private_key",
     "is protected by a passphrase"),
    ("registry", {**REGISTRY, "server": "https://Not A Host/"}, "server", "is a registry host"),
    ("registry", {**REGISTRY, "password": "x" * 4097}, "password", "may be at most 4,096 characters"),
    ("vault", {}, "kind", "“vault” is not a kind of credential"),
])
def test_a_bad_value_is_refused_naming_its_field_and_nothing_is_made(ready_team, member, kind, values, field, words):
    with pytest.raises(DomainError) as refusal:
        credentials.credential_create(actor=member, team=ready_team, name="bad", kind=kind, values=values)
    assert refusal.value.field == field and words in refusal.value.message, refusal.value.message
    assert not TeamCredential.objects.exists()
    assert not [s for s in gateway().list("v1", "Secret", namespace=ready_team.namespace)[0]
                if s["metadata"]["name"].startswith("cred-")]


def test_a_name_is_the_teams_once_and_only_its_members_keep_credentials(ready_team, member, outsider):
    credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    with pytest.raises(DomainError, match="vision already has a credential named “datalake”"):
        credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="registry", values=REGISTRY)
    with pytest.raises(DomainError, match="Use lower-case letters"):
        credentials.credential_create(actor=member, team=ready_team, name="Data_Lake", kind="s3", values=S3)
    with pytest.raises(PermissionDenied):
        credentials.credential_create(actor=outsider, team=ready_team, name="theirs", kind="s3", values=S3)
    assert TeamCredential.objects.count() == 1


# --- Rotating and deleting -------------------------------------------------------------------------


def test_rotating_replaces_every_value_in_place_and_is_audited(ready_team, member, lead):
    credential = credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    name = credential.secret_name
    credentials.credential_rotate(actor=lead, credential=credential,
                                  values={"access_key_id": "AKIANEWKEY000002", "secret_access_key": "n3w-s3cret"})

    assert credential.secret_name == name
    assert decoded(secret_of(credential)) == {"AWS_ACCESS_KEY_ID": "AKIANEWKEY000002", "AWS_SECRET_ACCESS_KEY": "n3w-s3cret"}
    credential.refresh_from_db()
    assert (credential.hint, credential.rotated_by) == ("key …0002", lead)
    assert "lena rotated the credential datalake of vision (key …0002)" in AuditEvent.objects.get(
        action="credential.rotated").message
    assert "n3w-s3cret" not in everything_stored()
    with pytest.raises(DomainError, match="Secret access key: is needed"):
        credentials.credential_rotate(actor=lead, credential=credential, values={"access_key_id": "AKIA3"})
    assert decoded(secret_of(credential))["AWS_SECRET_ACCESS_KEY"] == "n3w-s3cret"


def test_a_credential_a_workload_mounts_is_not_deleted_until_it_stops(ready_team, member, with_keys, flavor,
                                                                      django_capture_on_commit_callbacks):
    credential = credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, with_keys, flavor, parameters={"bucket": "datalake"})
    (row,) = credentials.team_credentials(team=ready_team)
    assert row.used_by == (workload.name,) and not row.deletable
    with pytest.raises(StateConflict, match=f"datalake is in use by {workload.name}; stop that first"):
        credentials.credential_delete(actor=member, credential=credential)
    assert secret_of(credential) is not None

    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.STOPPED)
    credentials.credential_delete(actor=member, credential=credential)
    assert secret_of(credential) is None and not TeamCredential.objects.exists()
    assert AuditEvent.objects.filter(action="credential.deleted", data__name="datalake").exists()


# --- Mounted by name -------------------------------------------------------------------------------


def test_a_launch_mounts_each_kind_as_its_consumer_reads_it(ready_team, member, with_keys, flavor,
                                                           django_capture_on_commit_callbacks):
    s3 = credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    key = credentials.credential_create(actor=member, team=ready_team, name="repo", kind="git-ssh",
                                        values={"private_key": PRIVATE_KEY})
    login = credentials.credential_create(actor=member, team=ready_team, name="pull", kind="registry", values=REGISTRY)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, with_keys, flavor,
                          parameters={"bucket": "datalake", "deploy_key": "repo", "pull": "pull"})

    pod = services.workload_spec(workload)
    job = next(obj for obj in kinds.get("training").build(pod) if obj["kind"] in ("Job", "JobSet"))
    template = job["spec"]["template"]["spec"]
    (main,) = template["containers"]
    assert main["envFrom"] == [{"secretRef": {"name": s3.secret_name}}]
    assert {"name": "key-1", "mountPath": "/keys/git", "readOnly": True} in main["volumeMounts"]
    assert {"name": "key-1", "secret": {"secretName": key.secret_name, "defaultMode": 0o400}} in template["volumes"]
    assert template["imagePullSecrets"] == [{"name": login.secret_name}]
    assert SECRET not in json.dumps(job)


@pytest.mark.parametrize(("given", "words"), [
    ({"bucket": "nowhere"}, "bucket: vision has no S3 access key named “nowhere”"),
    ({"pull": "datalake"}, "pull: vision has no Image registry login named “datalake”"),
])
def test_a_launch_naming_a_credential_the_team_lacks_or_of_another_kind_is_refused(ready_team, member, with_keys, flavor,
                                                                                   given, words):
    credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    with pytest.raises(DomainError) as refusal:
        launch(member, ready_team, with_keys, flavor, parameters=given)
    assert words in refusal.value.message
    assert not Workload.objects.exists()


def test_another_teams_credential_of_the_same_name_is_not_mounted(ready_team, member, with_keys, flavor, other_team,
                                                                  admin_user):
    credentials.credential_create(actor=admin_user, team=make_ready(other_team, flavor), name="datalake", kind="s3",
                                  values=S3)
    with pytest.raises(DomainError, match="vision has no S3 access key named “datalake”"):
        launch(member, ready_team, with_keys, flavor, parameters={"bucket": "datalake"})


# --- Half done -------------------------------------------------------------------------------------


def test_a_credential_the_cluster_refuses_is_not_kept(ready_team, member, simulated, monkeypatch):
    def refuse(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise KubeError('secrets "cred-x" is forbidden: exceeded quota: count/secrets=10', status=403)

    monkeypatch.setattr(simulated, "apply", refuse)
    with pytest.raises(DomainError, match="The cluster refused the credential datalake, so it was not kept"):
        credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    assert not TeamCredential.objects.exists()
    assert AuditEvent.objects.filter(action="credential.refused").exists()


def test_a_credential_the_cluster_did_not_answer_about_is_removed_by_the_repair_pass(ready_team, member, simulated,
                                                                                     monkeypatch):
    made: list[dict[str, Any]] = []
    real_apply = simulated.apply

    def made_then_lost(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        made.append(real_apply(obj, **kwargs))  # the API server stored it; its answer never came back
        raise KubeError("http2: client connection lost")

    with monkeypatch.context() as patch:
        patch.setattr(simulated, "apply", made_then_lost)
        with pytest.raises(DomainError, match="did not answer about the credential datalake, so it was not kept"):
            credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    (credential,) = TeamCredential.objects.all()
    assert credential.state == TeamCredential.State.DELETING and secret_of(credential) is not None

    assert credentials.credentials_repair() == 1
    assert secret_of(credential) is None and not TeamCredential.objects.exists()


def test_with_nothing_unfinished_the_repair_pass_calls_nothing(ready_team, member, simulated):
    credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    counting = CountingGateway(simulated)
    reset_gateway(counting)
    assert credentials.credentials_repair() == 0
    assert counting.total == 0


# --- Pages and API ---------------------------------------------------------------------------------


def test_the_page_keeps_rotates_and_deletes_and_never_shows_a_value(ready_team, member, client):
    client.force_login(member)
    page = client.get(reverse("jobs:team-credentials", args=[ready_team.slug]))
    assert page.status_code == 200 and "keeps no credential yet" in page.content.decode()
    create = reverse("jobs:credential-create", args=[ready_team.slug])

    refused = client.post(create, {"name": "repo", "kind": "git-ssh", "private_key": f"{PRIVATE_KEY}junk"},
                          HTTP_HX_REQUEST="true")
    assert "paste the whole private key" in refused.content.decode()
    assert "b3BlbnNzaC1rZXkt" not in refused.content.decode()  # the key typed is not put back into the page
    made = client.post(create, {"name": "datalake", "kind": "s3", **S3}, HTTP_HX_REQUEST="true")
    text = made.content.decode()
    assert "Kept the S3 access key datalake (key …MPLE at minio.example.com, eu-west-1)" in text and SECRET not in text

    rotated = client.post(reverse("jobs:credential-rotate", args=[ready_team.slug, "datalake"]),
                          {"access_key_id": "AKIANEWKEY000002", "secret_access_key": "n3w"}, HTTP_HX_REQUEST="true")
    assert "Rotated datalake (key …0002)" in rotated.content.decode() and "n3w" not in rotated.content.decode()
    gone = client.post(reverse("jobs:credential-delete", args=[ready_team.slug, "datalake"]), HTTP_HX_REQUEST="true")
    assert "Deleted the credential datalake." in gone.content.decode()


def test_another_teams_credentials_are_404_and_finance_sees_none(ready_team, member, outsider, finance_user, client):
    credential = credentials.credential_create(actor=member, team=ready_team, name="datalake", kind="s3", values=S3)
    client.force_login(outsider)
    for response in (client.get(reverse("jobs:team-credentials", args=[ready_team.slug])),
                     client.post(reverse("jobs:credential-create", args=[ready_team.slug]), {"name": "x", "kind": "s3"}),
                     client.post(reverse("jobs:credential-rotate", args=[ready_team.slug, "datalake"]), S3),
                     client.post(reverse("jobs:credential-delete", args=[ready_team.slug, "datalake"]))):
        assert response.status_code == 404
    caller = api(outsider)
    assert caller.get("/api/credentials/").json()["results"] == []
    assert caller.get(f"/api/credentials/{credential.pk}/").status_code == 404
    assert caller.post(f"/api/credentials/{credential.pk}/rotate/", {"values": S3}, format="json").status_code == 404
    assert caller.delete(f"/api/credentials/{credential.pk}/").status_code == 404

    client.force_login(finance_user)
    assert client.get(reverse("jobs:team-credentials", args=[ready_team.slug])).status_code == 403
    assert api(finance_user).get("/api/credentials/").json()["results"] == []
    assert secret_of(credential) is not None


def test_the_api_keeps_lists_rotates_and_deletes_and_never_returns_a_value(ready_team, member):
    caller = api(member)
    made = caller.post("/api/credentials/", {"team": "vision", "name": "datalake", "kind": "s3", "values": S3},
                       format="json")
    assert made.status_code == 201, made.json()
    body = made.json()
    assert (body["team"], body["name"], body["kind"], body["hint"]) == ("vision", "datalake", "s3",
                                                                        "key …MPLE at minio.example.com, eu-west-1")
    assert SECRET not in made.content.decode()
    listed = caller.get("/api/credentials/?team=vision")
    assert [c["name"] for c in listed.json()["results"]] == ["datalake"] and SECRET not in listed.content.decode()
    bad = caller.post("/api/credentials/", {"team": "vision", "name": "x", "kind": "s3", "values": {"access_key_id": "A"}},
                      format="json")
    assert bad.status_code == 400 and "Secret access key: is needed." in str(bad.json())
    rotated = caller.post(f"/api/credentials/{body['id']}/rotate/",
                          {"values": {"access_key_id": "AKIANEWKEY000002", "secret_access_key": "n3w"}}, format="json")
    assert rotated.status_code == 200 and rotated.json()["rotated_by"] == "alice"
    assert caller.delete(f"/api/credentials/{body['id']}/").status_code == 204
    assert not TeamCredential.objects.exists()
