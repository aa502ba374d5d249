"""A new user of the demo can run their own code: the seeded template trains from a repository
they give (from the site's allowed git sources) at the revision they give, with their team's
seeded data volume if they choose it; a repository from elsewhere is refused in words."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from demo.site import DATA_VOLUME, OWN_CODE_TEMPLATE, PASSWORD
from jobs import kinds, services
from jobs.models import GitSource, TeamVolume, Workload, WorkloadTemplate
from portal.kube import ObjectRef, gateway
from tests.helpers import api

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(simulated) -> WorkloadTemplate:
    call_command("seed_demo", stdout=StringIO())
    return WorkloadTemplate.objects.get(slug=OWN_CODE_TEMPLATE)


def test_the_demo_allows_github_and_gives_every_team_a_data_volume_within_its_storage_quota(demo, client):
    assert list(GitSource.objects.values_list("prefix", flat=True)) == ["github.com"]
    for namespace in ("vision", "nlp", "recsys"):
        assert gateway().get(ObjectRef("v1", "PersistentVolumeClaim", DATA_VOLUME, namespace)) is not None
    # Made through the portal, so a member sees it on the team's volumes page, with what is left.
    assert TeamVolume.objects.filter(name=DATA_VOLUME, applied=True).count() == 3
    client.login(username="alice", password=PASSWORD)
    page = client.get(reverse("jobs:team-volumes", args=["vision"])).content.decode()
    assert DATA_VOLUME in page and "400 GiB" in page


def test_a_member_launches_the_demo_template_with_a_repository_of_their_own(demo, client):
    client.login(username="alice", password=PASSWORD)
    url = reverse("jobs:workload-launch")
    form = client.get(url, {"team": "vision", "template": demo.pk}).content.decode()
    assert "https://github.com/pytorch/examples" in form and f'value="{DATA_VOLUME}"' in form

    response = client.post(url, {
        "team": "vision", "template": demo.pk, "flavor": "h100-80gb", "units": "1",
        "p_repository": "https://github.com/alice/detector", "p_repository-revision": "v1.2",
        "p_script": "/workspace/code/train.py\n--epochs\n3", "p_data": DATA_VOLUME})

    assert response.status_code in (200, 302), response.content.decode()[:2000]
    workload = Workload.objects.get(template_version__template=demo)
    assert workload.parameters == {"repository": {"url": "https://github.com/alice/detector", "revision": "v1.2"},
                                   "script": ["/workspace/code/train.py", "--epochs", "3"], "data": DATA_VOLUME}
    (job,) = kinds.workload_objects(spec=services.workload_spec(workload))
    pod = job["spec"]["template"]["spec"]
    fetch = {variable["name"]: variable["value"] for variable in pod["initContainers"][0]["env"]}
    assert (fetch["REPO_URL"], fetch["REPO_REVISION"]) == ("https://github.com/alice/detector", "v1.2")
    assert pod["containers"][0]["command"] == ["python"]
    assert pod["containers"][0]["args"] == ["/workspace/code/train.py", "--epochs", "3"]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": DATA_VOLUME, "readOnly": True}} in pod["volumes"]


def test_a_repository_off_the_allow_list_is_refused_in_words(demo):
    from portal.models import User

    alice = User.objects.get(username="alice")
    refused = api(alice).post("/api/workloads/", {
        "team": "vision", "template": demo.pk, "flavor": "h100-80gb", "units": 1,
        "parameters": {"repository": {"url": "https://gitlab.com/alice/detector", "revision": "main"}}}, format="json")

    assert refused.status_code == 400
    assert refused.json()["errors"] == {"parameters": [(
        "repository: the repository https://gitlab.com/alice/detector is not from a source this portal fetches code "
        "from; allowed: github.com.")]}
    assert not Workload.objects.filter(template_version__template=demo).exists()


def test_a_demo_site_seeded_before_the_template_existed_gets_it_when_seeded_again(demo):
    demo.delete()
    GitSource.objects.all().delete()

    call_command("seed_demo", stdout=StringIO())
    call_command("seed_demo", stdout=StringIO())

    assert WorkloadTemplate.objects.filter(slug=OWN_CODE_TEMPLATE).count() == 1
    assert list(GitSource.objects.values_list("prefix", flat=True)) == ["github.com"]
