"""Templates that run a data scientist's own data and code: one of the team's data volumes (a
PersistentVolumeClaim in its namespace) and a git repository fetched by an init container.

Invariants: a launch mounts only a claim that is in the launching team's namespace when it is
launched (read then, not remembered), read-only unless the template says otherwise, at the path
the template declares; a repository comes only from https sources the site allows, and what a user
types reaches the fetch only as environment values after `--`, never as shell text or options; the
fetch runs as Pod Security `restricted` asks."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
from django.urls import reverse

from jobs import kinds, manifests, services
from jobs.kinds import training
from jobs.models import Workload, WorkloadKind
from jobs.parameters import ParameterError, check_declarations, validate_parameters
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from tenants.models import Membership
from tests.factories import MembershipFactory
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db

DATA = [
    {"name": "data", "type": "volume", "mount_path": "/data"},
    {"name": "scratch", "type": "volume", "mount_path": "/scratch", "read_only": False},
    {"name": "code", "type": "git", "mount_path": "/workspace/code", "prefixes": ["github.com/acme"]},
]


def claim(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}


@pytest.fixture
def sources(settings):
    settings.PORTAL_GIT_SOURCES = ["github.com/acme", "git.example.com"]
    settings.PORTAL_GIT_IMAGE = "registry.example.com/tools/git:2.47"


@pytest.fixture
def own_data(admin_user, flavor, sources):
    return services.template_create(
        user=admin_user, slug="own-data", name="Your data and code", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", command=["python"], args=["/workspace/code/train.py"], default_units=1,
        max_units=4, parameters=DATA)


@pytest.fixture
def team_claims(ready_team):
    for name in ("imagenet", "scratch-space"):
        gateway().apply(claim(ready_team.namespace, name))
    return ready_team


@pytest.fixture
def other_claims(other_team, flavor, simulated):
    make_ready(other_team, flavor)
    gateway().apply(claim(other_team.namespace, "speech-corpus"))
    return other_team


def pod_spec(workload: Workload) -> dict[str, Any]:
    (job,) = kinds.workload_objects(spec=services.workload_spec(workload))
    return job["spec"]["template"]["spec"]


# --- What lands in the pod -------------------------------------------------------------------------


def test_the_chosen_volumes_and_repository_are_mounted_where_the_template_says(team_claims, member, own_data, flavor):
    workload = launch(member, team_claims, own_data, flavor, parameters={
        "data": "imagenet", "scratch": "scratch-space",
        "code": {"url": "https://github.com/acme/vision.git", "revision": "v2.1"}})

    pod = pod_spec(workload)
    assert pod["volumes"] == [
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "data-1", "persistentVolumeClaim": {"claimName": "scratch-space", "readOnly": False}},
        {"name": "repo-0", "emptyDir": {"sizeLimit": "4Gi"}},
    ]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "data-0", "mountPath": "/data", "readOnly": True},
        {"name": "data-1", "mountPath": "/scratch", "readOnly": False},
        {"name": "repo-0", "mountPath": "/workspace/code"},
    ]
    assert pod["initContainers"] == [{
        "name": "fetch-repo-0",
        "image": "registry.example.com/tools/git:2.47",
        "command": ["sh", "-c", manifests.GIT_FETCH_SCRIPT],
        "env": [{"name": "REPO_URL", "value": "https://github.com/acme/vision.git"},
                {"name": "REPO_REVISION", "value": "v2.1"}, {"name": "REPO_PATH", "value": "/repo"},
                {"name": "GIT_TERMINAL_PROMPT", "value": "0"}, {"name": "GIT_CONFIG_NOSYSTEM", "value": "1"},
                {"name": "HOME", "value": "/tmp"}, {"name": "GIT_CONFIG_COUNT", "value": "3"},
                {"name": "GIT_CONFIG_KEY_0", "value": "protocol.allow"}, {"name": "GIT_CONFIG_VALUE_0", "value": "never"},
                {"name": "GIT_CONFIG_KEY_1", "value": "protocol.https.allow"},
                {"name": "GIT_CONFIG_VALUE_1", "value": "always"},
                {"name": "GIT_CONFIG_KEY_2", "value": "safe.directory"}, {"name": "GIT_CONFIG_VALUE_2", "value": "/repo"}],
        "volumeMounts": [{"name": "repo-0", "mountPath": "/repo"}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }]
    # The script is fixed: the user's values are only ever variables in double quotes, after `--`.
    assert manifests.GIT_FETCH_SCRIPT == ('set -eu\ncd "$REPO_PATH"\ngit init -q .\n'
                                          'git fetch -q --depth 1 -- "$REPO_URL" "$REPO_REVISION"\n'
                                          'git checkout -q --detach FETCH_HEAD\n')
    assert pod["securityContext"]["runAsNonRoot"] is True and "hostPath" not in str(pod["volumes"])


def test_leaving_the_volume_and_repository_empty_mounts_nothing(ready_team, member, own_data, flavor):
    pod = pod_spec(launch(member, ready_team, own_data, flavor, parameters={}))
    assert "volumes" not in pod and "initContainers" not in pod and "volumeMounts" not in pod["containers"][0]


def test_a_notebook_keeps_its_home_and_gets_the_data_volume_beside_it(team_claims, member, admin_user, flavor, sources):
    template = services.template_create(
        user=admin_user, slug="nb-data", name="Notebook with data", kind=WorkloadKind.NOTEBOOK, flavors=[flavor],
        image="quay.io/acme/nb:1", port=8888, storage_gib=10, default_units=1, max_units=1, parameters=DATA[:1])
    workload = launch(member, team_claims, template, flavor, units=1, parameters={"data": "imagenet"})
    statefulset = kinds.workload_objects(spec=services.workload_spec(workload))[2]
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "home", "mountPath": "/home/jovyan/work"}, {"name": "data-0", "mountPath": "/data", "readOnly": True}]


# --- The claim must be the team's, now --------------------------------------------------------------


def test_another_teams_claim_is_refused_as_if_it_did_not_exist(team_claims, other_claims, member, own_data, flavor):
    with pytest.raises(DomainError, match="data: vision has no data volume \\(PersistentVolumeClaim\\) named "
                                          "“speech-corpus” in its namespace") as refused:
        launch(member, team_claims, own_data, flavor, parameters={"data": "speech-corpus"})
    assert refused.value.field == "parameters"
    assert not team_claims.workloads.exists()


def test_a_claim_deleted_after_the_form_listed_it_is_refused_at_launch(team_claims, member, own_data, flavor):
    gateway().delete(ObjectRef("v1", "PersistentVolumeClaim", "imagenet", team_claims.namespace))
    with pytest.raises(DomainError, match="has no data volume .* named “imagenet”"):
        launch(member, team_claims, own_data, flavor, parameters={"data": "imagenet"})


def test_a_claim_deleted_before_a_lost_submission_is_sent_again_fails_it_in_words(
        team_claims, member, own_data, flavor, simulated, django_capture_on_commit_callbacks):
    from jobs import tasks

    workload = launch(member, team_claims, own_data, flavor, parameters={"data": "imagenet"})  # its task lost
    gateway().delete(ObjectRef("v1", "PersistentVolumeClaim", "imagenet", team_claims.namespace))
    tasks.workload_submit(workload.pk)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    assert workload.reason == ("Not created in the cluster: data: vision has no data volume (PersistentVolumeClaim) "
                               "named “imagenet” in its namespace; choose one of the team's volumes.")
    assert gateway().get(ObjectRef("batch/v1", "Job", workload.k8s_name, team_claims.namespace)) is None


def test_a_claim_that_cannot_be_read_at_submission_is_retried_not_failed(team_claims, member, own_data, flavor,
                                                                           simulated, monkeypatch):
    from jobs import selectors, tasks
    from portal.kube import KubeError

    workload = launch(member, team_claims, own_data, flavor, parameters={"data": "imagenet"})

    def unavailable(**kwargs: Any) -> bool:
        raise KubeError("etcdserver: request timed out", status=503)

    monkeypatch.setattr(selectors, "team_claim_exists", unavailable)
    with pytest.raises(KubeError):
        tasks.workload_submit.run(workload.pk)  # the task body: the retry policy sees a retriable error
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUBMITTING and workload.submit_attempts == 1


# --- Hostile values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "words"), [
    ({"data": "../speech/corpus"}, "data: “../speech/corpus” is not the name of a data volume"),
    ({"data": "ImageNet"}, "is not the name of a data volume"),
    ({"data": "-imagenet"}, "is not the name of a data volume"),
    ({"data": "imagenet;rm -rf /"}, "is not the name of a data volume"),
    ({"data": "imagenet\nscratch-space"}, "is not the name of a data volume"),
    ({"data": "dätä"}, "is not the name of a data volume"),
    ({"data": ["imagenet"]}, "is not the name of a data volume"),
    ({"code": "file:///etc/passwd"}, "code: “file:///etc/passwd” is not a repository URL"),
    ({"code": "ext::sh -c touch% /tmp/pwned"}, "is not a repository URL"),
    ({"code": "ssh://git@github.com/acme/x.git"}, "is not a repository URL"),
    ({"code": "git@github.com:acme/x.git"}, "is not a repository URL"),
    ({"code": "http://github.com/acme/x.git"}, "is not a repository URL"),
    ({"code": "--upload-pack=touch /tmp/pwned"}, "is not a repository URL"),
    ({"code": "https://user:secret@github.com/acme/x.git"}, "is not a repository URL"),
    ({"code": "https://github.com/acme/../evil/x.git"}, "is not a repository URL"),
    ({"code": "https://github.com/acme/x.git?upload-pack=x"}, "is not a repository URL"),
    ({"code": "https://gіthub.com/acme/x.git"}, "is not a repository URL"),  # a Cyrillic і
    ({"code": "https://github.com/acme/x.git\n--config"}, "is not a repository URL"),
    ({"code": "https://github.com/acme-evil/x.git"},
     "code: the repository https://github.com/acme-evil/x.git is not under github.com/acme"),
    ({"code": "https://github.com.evil.io/acme/x.git"}, "is not under github.com/acme"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "--upload-pack=touch /tmp/pwned"}},
     "code: “--upload-pack=touch /tmp/pwned” is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "-b"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "$(reboot)"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "main;id"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "main..HEAD"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "@{-1}"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "main\n--upload-pack=id"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "https://github.com/acme/x.git", "revision": "résumé"}}, "is not a branch, tag or commit"),
    ({"code": {"url": "", "revision": "main"}}, "code: a revision needs a repository URL"),
    ({"code": {"url": "https://github.com/acme/x.git", "mount_path": "/etc"}}, "must be a repository URL and a revision"),
])
def test_hostile_volume_and_repository_values_are_refused_with_words(team_claims, member, own_data, flavor, given, words):
    with pytest.raises(DomainError, match=re.escape(words)) as refused:
        launch(member, team_claims, own_data, flavor, parameters=given)
    assert refused.value.field == "parameters"
    assert not team_claims.workloads.exists()


def test_a_repository_the_template_allows_but_the_site_does_not_is_refused(team_claims, member, admin_user, flavor,
                                                                          settings, sources):
    template = services.template_create(
        user=admin_user, slug="any-git", name="Any git", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", default_units=1, max_units=4,
        parameters=[{"name": "code", "type": "git", "mount_path": "/code"}])
    with pytest.raises(DomainError, match="code: the repository https://gitlab.com/acme/x.git is not from a source this "
                                          "portal fetches code from; allowed: git.example.com, github.com/acme"):
        launch(member, team_claims, template, flavor, parameters={"code": "https://gitlab.com/acme/x.git"})
    settings.PORTAL_GIT_SOURCES = []
    with pytest.raises(DomainError, match="allowed: none yet"):
        launch(member, team_claims, template, flavor, parameters={"code": "https://github.com/acme/x.git"})
    # A commit, and the default revision.
    settings.PORTAL_GIT_SOURCES = ["git.example.com"]
    workload = launch(member, team_claims, template, flavor, parameters={"code": "https://git.example.com/ml/x"})
    assert workload.parameters["code"] == {"url": "https://git.example.com/ml/x", "revision": "HEAD"}


def test_platform_admins_keep_the_git_allow_list_through_the_api_and_a_launch_follows_it(
        team_claims, member, lead, admin_user, flavor, settings, sources, django_capture_on_commit_callbacks):
    from jobs import tasks
    from jobs.models import GitSource
    from portal.models import AuditEvent

    settings.PORTAL_GIT_SOURCES = []
    template = services.template_create(
        user=admin_user, slug="any-git", name="Any git", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", default_units=1, max_units=4,
        parameters=[{"name": "code", "type": "git", "mount_path": "/code"}])
    code = {"code": "https://gitlab.example.com/ml/x.git"}
    with pytest.raises(DomainError, match="allowed: none yet"):
        launch(member, team_claims, template, flavor, parameters=code)

    assert api(lead).post("/api/git-sources/", {"prefix": "gitlab.example.com"}, format="json").status_code == 403
    assert api(member).post("/api/git-sources/", {"prefix": "gitlab.example.com"}, format="json").status_code == 403
    added = api(admin_user).post("/api/git-sources/", {"prefix": "https://GitLab.example.com/ml/", "note": "ML"},
                                 format="json")
    assert added.status_code == 201 and (added.json()["prefix"], added.json()["created_by"]) == ("gitlab.example.com/ml",
                                                                                                  "root")
    assert [s["prefix"] for s in api(member).get("/api/git-sources/").json()["results"]] == ["gitlab.example.com/ml"]
    again = api(admin_user).post("/api/git-sources/", {"prefix": "gitlab.example.com/ml"}, format="json")
    assert again.status_code == 400 and again.json()["message"] == "gitlab.example.com/ml is on the allow-list already."
    bad = api(admin_user).post("/api/git-sources/", {"prefix": "ssh://evil"}, format="json")
    assert bad.status_code == 400 and "is not a git source" in bad.json()["message"]

    workload = launch(member, team_claims, template, flavor, parameters=code)  # its submission waits (lost task)
    with pytest.raises(DomainError, match="allowed: gitlab.example.com/ml"):
        launch(member, team_claims, template, flavor, parameters={"code": "https://gitlab.example.com/ops/x.git"})

    entry = added.json()["id"]
    assert api(lead).delete(f"/api/git-sources/{entry}/").status_code == 403
    assert api(admin_user).delete(f"/api/git-sources/{entry}/").status_code == 204
    assert not GitSource.objects.exists()
    assert tasks.workload_submit(workload.pk) == "failed"  # sent again after the source left the list
    workload.refresh_from_db()
    assert workload.reason.startswith("Not created in the cluster: code: the repository https://gitlab.example.com/ml/x.git")
    audit = AuditEvent.objects.filter(action__startswith="git_source.").order_by("id")
    assert list(audit.values_list("message", flat=True)) == [
        "root allowed code from gitlab.example.com/ml", "root no longer allows code from gitlab.example.com/ml"]


@pytest.mark.parametrize(("declared", "words"), [
    ([{"name": "d", "type": "volume"}], "the mount path must be an absolute path"),
    ([{"name": "d", "type": "volume", "mount_path": "/"}], "the mount path must be an absolute path"),
    ([{"name": "d", "type": "volume", "mount_path": "data"}], "the mount path must be an absolute path"),
    ([{"name": "d", "type": "volume", "mount_path": "/data/../etc"}], "the mount path must be an absolute path"),
    ([{"name": "d", "type": "volume", "mount_path": "/etc/ssl"}], "/etc/ssl would hide part of the system"),
    ([{"name": "d", "type": "volume", "mount_path": "/var/run/secrets/kubernetes.io"}], "would hide part of the system"),
    ([{"name": "d", "type": "volume", "mount_path": "/data", "read_only": "no"}], "read_only must be true or false"),
    ([{"name": "g", "type": "git", "mount_path": "/code", "prefixes": ["file:///"]}], "prefixes are hosts"),
    ([{"name": "g", "type": "git", "mount_path": "/code", "default": "file:///etc"}], "is not a repository URL"),
    ([{"name": "d", "type": "volume", "mount_path": "/data"}, {"name": "g", "type": "git", "mount_path": "/data"}],
     "Two parameters mount at /data"),
    ([{"name": "d", "type": "volume", "mount_path": "/data"}, {"name": "g", "type": "git", "mount_path": "/data/code"}],
     "A mount path lies inside /data"),
])
def test_a_template_declaring_a_dangerous_mount_is_refused(declared, words):
    with pytest.raises(ParameterError, match=words.replace("(", r"\(")):
        check_declarations(declared)


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://github.com/acme/train", True),  # the entry names this one repository
    ("https://github.com/acme/train/", True),
    ("https://github.com/acme/train.git", False),  # another name
    ("https://github.com/acme/train-evil", False),
    ("https://github.com/acme", False),  # above the entry
])
def test_an_entry_may_name_one_repository_as_an_image_entry_may(url, allowed):
    from jobs import policy

    assert policy.git_url_allowed(url, ["github.com/acme/train"]) is allowed
    assert policy.git_url_allowed("https://github.com/acme/x", ["github.com/acme"])


def test_a_volume_is_read_only_unless_the_template_says_otherwise():
    declared: list[dict[str, Any]] = [{"name": "d", "type": "volume", "mount_path": "/data"}]
    check_declarations(declared)
    assert declared[0]["read_only"] is True
    assert validate_parameters(declared=declared, given={"d": " team-data "}) == {"d": "team-data"}


# --- The launch form, the API and the editor --------------------------------------------------------


def test_the_launch_form_offers_the_teams_claims_and_not_another_teams(client, team_claims, other_claims, member,
                                                                       own_data):
    client.force_login(member)
    page = client.get(reverse("jobs:workload-launch"), {"team": team_claims.slug, "template": own_data.pk})
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-testid="claims-data"' in html
    assert '<option value="imagenet">imagenet</option>' in html and ">scratch-space</option>" in html
    assert "speech-corpus" not in html
    assert "mounted at /data, read-only" in html and "fetched at launch into /workspace/code" in html


def test_the_launch_form_lists_claims_only_to_those_who_may_launch_for_the_team(client, team_claims, other_claims,
                                                                               outsider, finance_user, own_data):
    url = reverse("jobs:workload-launch")
    client.force_login(outsider)
    assert client.get(url, {"team": team_claims.slug, "template": own_data.pk}).status_code == 404
    # Finance sees every team; as a member of another team it has a launch form, but not this team's volumes.
    MembershipFactory(team=other_claims, user=finance_user, role=Membership.Role.MEMBER)
    client.force_login(finance_user)
    page = client.get(url, {"team": team_claims.slug, "template": own_data.pk})
    assert page.status_code == 200
    assert "imagenet" not in page.content.decode()


def test_the_launch_form_sends_a_repository_and_revision_and_a_chosen_claim(client, team_claims, member, own_data,
                                                                            flavor):
    client.force_login(member)
    response = client.post(reverse("jobs:workload-launch"), {
        "team": team_claims.slug, "template": own_data.pk, "flavor": flavor.slug, "units": "1", "p_data": "imagenet",
        "p_scratch": "", "p_code": "https://github.com/acme/vision.git", "p_code-revision": "main"})
    assert response.status_code in (200, 302), response.content.decode()[:2000]
    (workload,) = team_claims.workloads.all()
    assert workload.parameters == {"data": "imagenet", "scratch": "",
                                   "code": {"url": "https://github.com/acme/vision.git", "revision": "main"}}


def test_the_workload_page_says_what_was_mounted_where(client, team_claims, member, own_data, flavor):
    workload = launch(member, team_claims, own_data, flavor, parameters={
        "data": "imagenet", "code": {"url": "https://github.com/acme/vision.git", "revision": "v2.1"}})
    client.force_login(member)
    html = client.get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert "<strong>https://github.com/acme/vision.git</strong> at <code>v2.1</code>" in html
    assert "<strong>imagenet</strong></td><td class=\"muted small\">volume, at /data, read-only</td>" in html


def test_the_api_refuses_another_teams_claim_and_a_bad_revision_in_words(team_claims, other_claims, member, own_data):
    body = {"team": "vision", "template": own_data.pk, "flavor": "h100-80gb", "units": 1}
    refused = api(member).post("/api/workloads/", {**body, "parameters": {"data": "speech-corpus"}}, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"parameters": [(
        "data: vision has no data volume (PersistentVolumeClaim) named “speech-corpus” in its namespace; choose one of "
        "the team's volumes.")]}
    flag = api(member).post("/api/workloads/", {**body, "parameters": {
        "code": {"url": "https://github.com/acme/x.git", "revision": "--upload-pack=id"}}}, format="json")
    assert flag.status_code == 400
    assert "“--upload-pack=id” is not a branch, tag or commit" in flag.json()["message"]
    assert not Workload.objects.exists()


def test_the_template_editor_declares_a_volume_and_a_repository_with_their_mount_paths(client, admin_user, flavor,
                                                                                       sources):
    from tests.jobs.test_template_editor import editor_form

    client.force_login(admin_user)
    form = editor_form(params=[("data", "volume", "", "", "", ""), ("code", "git", "https://github.com/acme/x.git v1", "",
                                                                     "", "")])
    form.update(image="quay.io/acme/train:1", args="train.py", param_mount_path=["/data", "/code"])
    response = client.post(reverse("jobs:template-create"), form)
    assert response.status_code in (200, 302)
    from jobs.models import WorkloadTemplate

    version = WorkloadTemplate.objects.get(slug="finetune").current
    assert version.parameters == [
        {"name": "data", "type": "volume", "mount_path": "/data", "read_only": True, "default": ""},
        {"name": "code", "type": "git", "mount_path": "/code",
         "default": {"url": "https://github.com/acme/x.git", "revision": "v1"}},
    ]
    page = client.get(reverse("jobs:template-edit", args=[version.template_id])).content.decode()
    assert '<option value="volume" selected>' in page and 'value="/code"' in page
    assert 'value="https://github.com/acme/x.git v1"' in page


def test_the_api_declares_a_volume_and_a_repository_and_shows_them_back(admin_user, flavor, sources):
    body = {"slug": "data-api", "name": "Data", "kind": "training", "flavors": ["h100-80gb"],
            "image": "quay.io/acme/train:1", "max_units": 4, "parameters": [
                {"name": "data", "type": "volume", "mount_path": "/data", "read_only": False},
                {"name": "code", "type": "git", "mount_path": "/code", "prefixes": ["github.com/acme"]}]}
    response = api(admin_user).post("/api/templates/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["version"]["parameters"] == [
        {"name": "data", "type": "volume", "default": "", "mount_path": "/data", "read_only": False},
        {"name": "code", "type": "git", "default": {}, "prefixes": ["github.com/acme"], "mount_path": "/code"}]

    hostile = {**body, "slug": "data-etc", "parameters": [{"name": "d", "type": "volume", "mount_path": "/etc"}]}
    refused = api(admin_user).post("/api/templates/", hostile, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"parameters": [
        "Parameter d: /etc would hide part of the system or the notebook's own storage; choose a path such as /data."]}


# --- The fetch script itself, run with the git of this machine ----------------------------------------


def _fetch(tmp_path: Any, url: str, revision: str, *, allow_file: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs the init container's command and environment as the manifest has them, with the
    checkout in a temporary directory instead of /repo."""
    spec = manifests.WorkloadSpec(
        workload_id=1, name="wl-1", namespace="team-x", team="x", kind="training", image="i", command=(), args=(),
        env=(), gpu=(("nvidia.com/gpu", 1),), git_image="git",
        repositories=(manifests.GitSource(url=url, revision=revision, mount_path="/code"),))
    (fetch,) = training.make_training_job(spec=spec)["spec"]["template"]["spec"]["initContainers"]
    env = {item["name"]: item["value"] for item in fetch["env"]}
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env.update(REPO_PATH=str(checkout), PATH=os.environ["PATH"])
    if allow_file:  # only so a local repository can stand in for an https one
        env.update(GIT_CONFIG_COUNT="4", GIT_CONFIG_KEY_3="protocol.file.allow", GIT_CONFIG_VALUE_3="always")
    return subprocess.run(fetch["command"], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def upstream(tmp_path):
    repo = tmp_path / "upstream"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for version in ("one", "two"):
        (repo / "train.py").write_text(f"print('{version}')\n")
        subprocess.run([*git, "add", "train.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", version], check=True)
        subprocess.run([*git, "tag", f"v-{version}"], check=True)
    first = subprocess.run([*git, "rev-parse", "v-one"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "config", "uploadpack.allowAnySHA1InWant", "true"], check=True)
    return repo, first


@pytest.mark.parametrize("revision", ["main", "v-one", "first-commit"])
def test_the_fetch_checks_out_a_branch_a_tag_or_a_commit(tmp_path, upstream, revision):
    repo, first = upstream
    result = _fetch(tmp_path, f"file://{repo}", first if revision == "first-commit" else revision, allow_file=True)
    assert result.returncode == 0, result.stderr
    expected = "print('two')\n" if revision == "main" else "print('one')\n"
    assert (tmp_path / "checkout" / "train.py").read_text() == expected


def test_a_shortened_commit_id_fails_the_fetch_so_the_launch_refuses_it_in_words(tmp_path, upstream):
    repo, first = upstream
    assert _fetch(tmp_path, f"file://{repo}", first[:10], allow_file=True).returncode != 0  # why it is refused
    from jobs.policy import git_revision_problem

    assert git_revision_problem(first[:10]) == (f"“{first[:10]}” looks like a shortened commit id, which git cannot "
                                                "fetch; give the full 40-character commit id, a branch or a tag.")
    assert git_revision_problem(first) is None and git_revision_problem("deadbeef") is None  # a full id; a branch name
    assert git_revision_problem("v1.2.3") is None and git_revision_problem("release-2024") is None


@pytest.mark.parametrize("url", ["file://{repo}", "ext::sh -c touch% {marker}"])
def test_the_fetch_itself_refuses_every_transport_but_https(tmp_path, upstream, url):
    """Should a URL get past the portal's checks, git, as the fetch configures it, still refuses it."""
    repo, _ = upstream
    marker = tmp_path / "pwned"
    result = _fetch(tmp_path, url.format(repo=repo, marker=marker), "main")
    assert result.returncode != 0
    assert "not allowed" in result.stderr
    assert not (tmp_path / "checkout" / "train.py").exists() and not marker.exists()


def test_a_revision_that_looks_like_an_option_is_a_revision_to_the_fetch(tmp_path, upstream):
    repo, _ = upstream
    marker = tmp_path / "pwned"
    result = _fetch(tmp_path, f"file://{repo}", f"--upload-pack=touch {marker}", allow_file=True)
    assert result.returncode != 0 and not marker.exists()
