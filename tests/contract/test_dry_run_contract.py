"""The template editor's guard, on both clusters: what a launch would create is admitted by a
server-side dry run (dryRun=All) and stored nowhere, and what the API server refuses comes back
as its refusal in words; the REST API's saves pass the same guard and save nothing refused."""

from __future__ import annotations

import pytest

from jobs import services as job_services
from jobs.models import WorkloadKind, WorkloadTemplate
from portal.kube import ObjectRef, gateway
from tests.factories import FlavorFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db

FIELDS = {"image": "registry.example.com/ml/runtime:1", "command": ["python", "main.py"], "default_cpu": 1,
          "default_memory_gib": 1}


def test_a_dry_run_admits_a_launch_without_storing_it_and_refuses_in_the_api_servers_words(cluster, site):
    team = site.team("dryrun")
    preview = job_services.template_preview(user=site.admin, kind=WorkloadKind.TRAINING, fields=dict(FIELDS),
                                            flavors=[site.flavor], team=team)
    assert preview.accepted, preview.refusal
    assert [obj["kind"] for obj in preview.objects] == ["Job"]
    assert gateway().get(ObjectRef("batch/v1", "Job", job_services.PREVIEW_NAME, team.namespace)) is None

    # The catalog refuses a name part this long (Flavor.clean); a row from before that check reaches the API server.
    long_name = "example.com/" + "g" * 64
    odd = FlavorFactory.create(name=cluster.unique("Odd"), slug=cluster.unique("odd"), resource_name=long_name)
    refused = job_services.template_preview(user=site.admin, kind=WorkloadKind.TRAINING, fields=dict(FIELDS),
                                            flavors=[odd], team=team)
    assert refused.checked and not refused.accepted
    assert f"resources.limits[{long_name}]" in refused.refusal, refused.refusal
    assert "name part must be no more than 63 bytes" in refused.refusal, refused.refusal

    body = {"slug": cluster.unique("refused"), "name": "Refused", "kind": "training", "flavors": [odd.slug],
            "check_in": team.slug, **FIELDS}
    answer = api(site.admin).post("/api/templates/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert "name part must be no more than 63 bytes" in answer.json()["message"], answer.json()
    assert not WorkloadTemplate.objects.filter(slug=body["slug"]).exists()
