"""Running the platform from the portal in a real browser (Debian's Chromium, Playwright): a platform
admin creates a team, adds a flavor from a catalog preset and writes a template, checking its
manifests against the (simulated) cluster; then a member launches from it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobs.models import Workload, WorkloadTemplate
from tenants.models import Flavor, Team
from tests.browsing import SHOTS, htmx_settled, log_in, sync_api
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def people(simulated: Any) -> None:
    UserFactory.create(username="root", is_platform_admin=True)
    UserFactory.create(username="alice", first_name="Alice", last_name="Scientist")


def test_an_admin_sets_up_a_team_a_flavor_and_a_template_and_a_member_launches_from_it(browser, live_server, people):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    root = log_in(browser, live_server, "root")

    root.click("nav >> text=Teams")
    root.click("text=New team")
    root.fill("#id_slug", "nlp")
    root.fill("#id_name", "Language Models")
    root.fill("#id_cost_center", "CC-7")
    root.click("button:has-text('Create team')")
    root.wait_for_url(f"{live_server.url}/teams/nlp/")
    expect(root.locator(".flash.success")).to_contain_text("Created team nlp")
    root.fill("#id_username", "alice")
    root.click("form.add-member button")
    htmx_settled(root)
    expect(root.locator("#members")).to_contain_text("alice")

    root.click("nav >> text=Capacity")
    root.click("text=GPU catalog")
    root.select_option("#preset", "nvidia-h100")
    root.click("button:has-text('Add a flavor')")
    expect(root.locator("#id_resource_name")).to_have_value("nvidia.com/gpu")
    expect(root.locator("#id_node_labels")).to_contain_text("NVIDIA-H100-80GB-HBM3")
    root.fill("#id_capacity_units", "16")
    root.click("button:has-text('Add flavor')")
    expect(root.locator("[data-testid=flavor-h100-80gb]")).to_contain_text("16")
    assert Flavor.objects.get().node_labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    # Nothing launches on a flavor without a price: the catalog says so and leads to the rate card.
    unpriced = root.locator("[data-testid=flavor-h100-80gb] [data-testid=unpriced]")
    expect(unpriced).to_contain_text("No price yet: nothing launches on it")
    unpriced.locator("a").click()
    expect(root.locator("#id_flavor")).to_have_value("h100-80gb")
    root.fill("#id_price_per_gpu_hour", "2.50")
    root.click("button:has-text('Set price')")
    expect(root.locator(".flash.success")).to_contain_text("H100 80GB costs 2.50 USD per GPU-hour")
    root.goto(f"{live_server.url}/platform/catalog/")
    expect(root.locator("[data-testid=flavor-h100-80gb] [data-testid=unpriced]")).to_have_count(0)

    root.goto(f"{live_server.url}/templates/")
    root.click("text=New template")
    root.fill("#id_slug", "finetune")
    root.fill("#id_name", "Fine-tune")
    root.select_option("#id_kind", "training")
    root.fill("#id_image", "pytorch/pytorch:2.5")
    root.fill("#id_command", "python\ntrain.py")
    root.fill("#id_args", "--epochs\n{epochs}")
    root.locator("input[name=param_name]").first.fill("epochs")
    root.locator("select[name=param_type]").first.select_option("int")
    root.locator("input[name=param_default]").first.fill("3")
    root.locator("input[name=param_min]").first.fill("1")
    root.locator("input[name=param_max]").first.fill("50")
    root.check("input[name=flavors][value=h100-80gb]")
    root.select_option("#id_check_in", "nlp")
    root.click("button:has-text('Preview the manifests')")
    expect(root.locator("[data-testid=dry-run]")).to_contain_text("The API server admitted all 1 object")
    expect(root.locator("[data-testid=manifests]")).to_contain_text('"nvidia.com/gpu": "1"')
    root.screenshot(path=str(SHOTS / "template_editor.png"), full_page=True)
    root.click("button:has-text('Create template')")
    root.wait_for_url(f"{live_server.url}/templates/")
    expect(root.locator(".flash.success")).to_contain_text("Published Fine-tune v1, checked in nlp's namespace")
    template = WorkloadTemplate.objects.get(slug="finetune")

    alice = log_in(browser, live_server, "alice")
    alice.click("nav >> text=Launch")
    expect(alice.locator("#id_team")).to_have_value("nlp")
    expect(alice.locator("#id_template")).to_have_value(str(template.pk))
    expect(alice.locator("[data-testid=hint-isolation]")).to_contain_text("Whole GPUs of your own")
    alice.fill("#id_p_epochs", "5")
    htmx_settled(alice)
    alice.click("button:has-text('Launch')")
    alice.wait_for_url(re.compile(r"/workloads/\d+/$"))
    workload = Workload.objects.get()
    assert (workload.team, workload.template_version.template, workload.parameters["epochs"]) == (
        Team.objects.get(slug="nlp"), template, 5)


def test_an_admin_makes_a_department_and_puts_a_team_in_it(browser, live_server, people):
    expect = sync_api.expect
    root_user = UserFactory.create(username="ada", is_platform_admin=True)
    Team.objects.create(slug="vision", name="Computer Vision")
    root = log_in(browser, live_server, root_user.username)

    root.click("nav >> text=Capacity")
    root.click("a:has-text('Departments')")
    expect(root.locator("[data-testid=departments]")).to_contain_text("No departments")
    root.fill("#id_name", "AI Research")
    root.fill("#id_slug", "Research!")  # not a name a cohort may take: said on its field, nothing saved
    root.fill("#id_lending_limit", "0")
    root.click("button:has-text('Create department')")
    expect(root.locator("[data-testid=error-slug]")).to_contain_text("is not a valid name")
    expect(root.locator("#id_name")).to_have_value("AI Research")
    root.fill("#id_slug", "research")
    root.click("button:has-text('Create department')")
    expect(root.locator(".flash.success")).to_contain_text("Created department AI Research")
    expect(root.locator("[data-testid=department-research]")).to_contain_text("nothing")  # lends nothing outside

    root.goto(f"{live_server.url}/platform/teams/vision/edit/")
    root.select_option("#id_department", label="AI Research")
    root.click("button:has-text('Save')")
    expect(root.locator("[data-testid=team-department]")).to_contain_text("department AI Research")
    root.goto(f"{live_server.url}/platform/departments/")
    expect(root.locator("[data-testid=department-research]")).to_contain_text("Computer Vision")
    assert Team.objects.filter(slug="vision", department__slug="research").exists()
