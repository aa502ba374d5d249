"""The launch story in a real browser: a member watches the live quota hint change as she picks
GPUs, launches, and sees her run go from Queued to Running to Succeeded without reloading.

The live server runs in another thread, so this test drives the simulated cluster: it moves the
cluster's clock and runs the status sync, and the page's polling picks the changes up.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from jobs import services, sync
from jobs.models import Workload, WorkloadKind
from portal.kube import gateway
from portal.kube.simulated import SimulatedGateway
from tenants import reconcile
from tenants.models import Membership
from tests.browsing import SHOTS, htmx_settled, log_in, sync_api
from tests.factories import (
    FlavorFactory,
    MembershipFactory,
    QuotaGrantFactory,
    TeamFactory,
    UserFactory,
)
from tests.helpers import ensure_priced

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site(simulated: SimulatedGateway) -> dict[str, Any]:
    vision = TeamFactory.create(slug="vision", name="Computer Vision")
    nlp = TeamFactory.create(slug="nlp", name="Language Models")
    h100 = ensure_priced(FlavorFactory.create(name="H100 80GB", slug="h100-80gb", resource_name="nvidia.com/gpu",
                                              capacity_units=16))
    alice = UserFactory.create(username="alice", first_name="Alice", last_name="Scientist")
    admin = UserFactory.create(username="root", is_platform_admin=True)
    MembershipFactory(team=vision, user=alice, role=Membership.Role.MEMBER)
    QuotaGrantFactory(team=vision, flavor=h100, units=2)
    QuotaGrantFactory(team=nlp, flavor=h100, units=8)
    reconcile.platform_reconcile()
    for team in (vision, nlp):
        reconcile.team_reconcile(team_id=team.pk)
    template = services.template_create(
        user=admin, slug="pytorch-train", name="PyTorch training", kind=WorkloadKind.TRAINING, flavors=[h100],
        description="Single-node training with torchrun.", image="pytorch/pytorch:2.5", command=["python", "train.py"],
        args=["--epochs", "{epochs}"], default_units=1, max_units=8,
        parameters=[{"name": "epochs", "type": "int", "default": 10, "min": 1, "max": 1000},
                    {"name": "image_tag", "type": "choice", "default": "2.5", "choices": ["2.4", "2.5"]}],
    )
    return {"team": vision, "flavor": h100, "template": template}


def drive_until(page: Any, phase: str, *, seconds: float = 5, limit: float = 30) -> None:
    """Moves the cluster on and syncs until the page shows the phase (its polling reads the sync's result)."""
    expect = sync_api.expect
    deadline = time.monotonic() + limit
    while True:
        gateway().advance(seconds)  # type: ignore[attr-defined]
        sync.sync_all()
        try:
            expect(page.locator("#workload-live [data-testid=phase]")).to_have_text(phase, timeout=4000)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_a_member_launches_from_the_form_and_watches_the_run_finish(browser, live_server, site):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    alice = log_in(browser, live_server, "alice")

    alice.click("nav >> text=Launch")
    expect(alice.locator("#id_team")).to_have_value("vision")
    expect(alice.locator("#id_template")).to_have_value(str(site["template"].pk))
    verdict = alice.locator("[data-testid=hint-verdict]")
    expect(verdict).to_contain_text("Fits your guarantee")
    expect(alice.locator("[data-testid=hint-guaranteed]")).to_have_text("2")
    expect(alice.locator("[data-testid=hint-free]")).to_have_text("2")

    alice.select_option("#id_flavor", "h100-80gb")
    alice.fill("#id_units", "4")
    expect(verdict).to_contain_text("Would borrow 2 units of other teams' idle quota")
    expect(verdict).to_have_class(re.compile(r"\bwarn\b"))
    expect(alice.locator("[data-testid=hint-gpus]")).to_contain_text("4 physical GPUs")

    alice.fill("#id_units", "9")
    expect(verdict).to_contain_text("GPU units must be between 1 and 8")

    alice.fill("#id_units", "2")
    expect(verdict).to_contain_text("Fits your guarantee")
    alice.fill("#id_p_epochs", "3")
    alice.fill("#id_name", "detector-v2")
    htmx_settled(alice)
    alice.screenshot(path=str(SHOTS / "launch.png"), full_page=True)

    alice.click("button:has-text('Launch')")
    alice.wait_for_url(re.compile(r"/workloads/\d+/$"))
    workload = Workload.objects.get()
    assert (workload.name, workload.units, workload.parameters["epochs"]) == ("detector-v2", 2, 3)
    expect(alice.locator(".flash.success")).to_contain_text("Launched detector-v2")
    expect(alice.locator("#workload-live [data-testid=phase]")).to_have_text("Queued")
    alice.evaluate("window.__noReload = 1")

    drive_until(alice, "Running", seconds=1)
    expect(alice.locator("#workload-live [data-testid=capacity]")).to_contain_text("guaranteed")
    expect(alice.locator("#workload-live [data-testid=pod]")).to_have_count(1)
    expect(alice.locator("[data-testid=logs]")).to_have_count(0)
    alice.click("[data-testid=show-logs]")
    expect(alice.locator("#workload-logs [data-testid=logs]")).to_contain_text("[simulated] phase Running")
    alice.screenshot(path=str(SHOTS / "workload.png"), full_page=True)

    drive_until(alice, "Succeeded", seconds=10)
    expect(alice.locator("[data-testid=timeline]")).to_contain_text("Finished successfully")
    assert alice.evaluate("window.__noReload") == 1
    assert alice.locator("#workload-live").get_attribute("hx-trigger") is None
    alice.screenshot(path=str(SHOTS / "workload_done.png"), full_page=True)

    alice.click("nav >> text=Workloads")
    expect(alice.locator(f"#workload-{workload.pk} [data-testid=phase]")).to_have_text("Succeeded")
    # Nothing active: the list only polls slowly, for a launch made elsewhere.
    assert alice.locator("#workload-rows").get_attribute("hx-trigger") == "every 15s"
    alice.screenshot(path=str(SHOTS / "workloads.png"), full_page=True)
    alice.click("text=Templates")
    expect(alice.locator(f"#template-{site['template'].pk}")).to_contain_text("epochs = 10")
    alice.screenshot(path=str(SHOTS / "templates.png"), full_page=True)
