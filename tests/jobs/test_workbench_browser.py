"""A data scientist's day in a real browser: she makes a data volume and keeps an S3 key for her
team, launches a VS Code workspace that mounts both, waits for it to run, and opens it.

The workspace's own host is not on this machine's network, so the walk ends where the browser
leaves the portal for it: Open, asked with her session, sends her to the workspace's host with a
one-time ticket, which the gate (as the ingress controller asks it) accepts once, for her."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from jobs import services, sync
from jobs.models import TeamCredential, Workload, WorkloadKind
from portal.kube import gateway
from portal.kube.simulated import SimulatedGateway
from tests.browsing import htmx_settled, log_in, sync_api
from tests.helpers import make_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_launches_a_vs_code_workspace_with_her_volume_and_key_and_opens_it(
        browser, live_server, simulated: SimulatedGateway, team, member, admin_user, flavor, settings):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.test"
    team.storage_quota = {"standard": 100}
    team.save()
    make_ready(team, flavor)
    template = services.template_create(
        user=admin_user, slug="vscode", name="VS Code", kind=WorkloadKind.WORKSPACE, flavors=[flavor],
        image="codercom/code-server:4.96.4", command=[], args=["--bind-addr", "0.0.0.0:8080"], port=8080,
        max_units=1, parameters=[{"name": "data", "type": "volume", "mount_path": "/data"},
                                 {"name": "bucket", "type": "credential", "credential_kind": "s3"}])
    page = log_in(browser, live_server, member.username)

    page.goto(f"{live_server.url}/teams/vision/volumes/")
    page.fill("#id_name", "imagenet")
    page.fill("#id_size_gib", "40")
    page.click("button:has-text('Make volume')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("volume-done")).to_contain_text("Made the volume imagenet")

    page.goto(f"{live_server.url}/teams/vision/credentials/")
    page.fill("#id_name", "datalake")
    page.fill("#id_access_key_id", "AKIAIOSFODNN7EXAMPLE")
    page.fill("#id_secret_access_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY")
    page.click("button:has-text('Keep credential')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("credential-done")).to_contain_text("Kept the S3 access key datalake")

    page.goto(f"{live_server.url}/launch/?team=vision&template={template.pk}")
    page.select_option("#id_flavor", flavor.slug)
    page.select_option("[data-testid=claims-data]", "imagenet")
    page.select_option("[data-testid=credentials-bucket]", "datalake")
    page.click("button:has-text('Launch')")
    page.wait_for_url(re.compile(r"/workloads/\d+/$"))
    workload = Workload.objects.get(team=team)
    assert workload.parameters == {"data": "imagenet", "bucket": "datalake"}

    deadline = time.monotonic() + 60
    while True:
        simulated.advance(1)
        sync.sync_all()
        try:
            sync_api.expect(page.locator("#workload-live [data-testid=phase]")).to_have_text("Running", timeout=4000)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    pods, _ = gateway().list("v1", "Pod", namespace=team.namespace)
    (pod,) = [p for p in pods if p["metadata"]["name"].startswith(workload.k8s_name)]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}} in pod["spec"]["volumes"]
    assert pod["spec"]["containers"][0]["envFrom"] == [
        {"secretRef": {"name": TeamCredential.objects.get(name="datalake").secret_name}}]

    page.reload()
    opened: list[str] = []

    def leave(route: Any) -> None:
        """The portal's answer to Open, as the browser gets it with her session: where it sends her
        is the walk's end (a route sees only the first address of a redirect)."""
        answer = route.fetch(max_redirects=0)
        opened.append(answer.headers["location"])
        route.fulfill(status=200, content_type="text/plain", body="code-server")

    page.context.route(re.compile(r".*/workloads/\d+/open/$"), leave)
    with page.context.expect_page() as tab:
        page.click("[data-testid=open-notebook]:has-text('Open VS Code workspace')")
    tab.value.wait_for_load_state()
    (url,) = opened
    assert re.fullmatch(r"https?://[a-z0-9-]+\.gpu\.test/\?gpu-portal-ticket=[^&]+", url), url

    gate = reverse("jobs:workload-gate", args=[workload.pk])
    first = Client().get(gate, HTTP_X_ORIGINAL_URL=url)
    assert first.status_code == 200 and first["X-Portal-User"] == member.username
    assert Client().get(gate, HTTP_X_ORIGINAL_URL=url).status_code == 401  # a ticket opens once
