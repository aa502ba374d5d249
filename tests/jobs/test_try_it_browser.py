"""The Try it box in a real browser: a member asks a running inference server a question on its
page and reads the answer in place; a server's error is said beside the box without losing what
she wrote."""

from __future__ import annotations

import pytest

from jobs import services
from jobs.models import Workload, WorkloadKind
from tests.browsing import htmx_settled, log_in, sync_api
from tests.helpers import launch
from tests.jobs.test_try_it import StandIn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_asks_a_running_server_on_its_page(browser, live_server, settings, ready_team, member, admin_user,
                                                    flavor):
    vllm = StandIn()
    settings.PORTAL_INFERENCE_URL = vllm.base + "/{namespace}/{name}"
    settings.PORTAL_CLUSTER = "kubernetes"  # the box is offered where servers really run
    template = services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE,
                                        flavors=[flavor], image="vllm/vllm-openai:0.6", port=8000, parameters=[])
    server = launch(member, ready_team, template, flavor)
    Workload.objects.filter(pk=server.pk).update(phase=Workload.Phase.RUNNING)
    try:
        page = log_in(browser, live_server, member.username)
        page.goto(f"{live_server.url}/workloads/{server.pk}/")
        box = page.get_by_test_id("try-it")
        box.locator("#try-prompt").fill("Name a <colour>.")
        box.locator("#try-tokens").fill("32")
        box.locator("button:has-text('Ask')").click()
        htmx_settled(page)
        sync_api.expect(page.get_by_test_id("try-reply")).to_have_text("You asked: Name a <colour>.")
        sync_api.expect(page.get_by_test_id("try-facts")).to_contain_text("meta-llama/Llama-3.1-8B-Instruct")
        assert page.url == f"{live_server.url}/workloads/{server.pk}/"  # answered in place
        assert vllm.asked[-1][2]["max_tokens"] == 32

        # The browser holds the bounds itself (the server checks them again: tests/jobs/test_try_it.py).
        sync_api.expect(page.locator("#try-tokens")).to_have_attribute("max", "1024")
        vllm.status, vllm.answer = 404, b'{"error": {"message": "The model `my-lora` does not exist."}}'
        page.locator("#try-model").fill("my-lora")
        page.locator("#try-it button:has-text('Ask')").click()
        htmx_settled(page)
        sync_api.expect(page.get_by_test_id("try-error")).to_have_text(
            "The server answered HTTP 404: The model `my-lora` does not exist.")
        sync_api.expect(page.locator("#try-prompt")).to_have_value("Name a <colour>.")  # what she wrote stays
        sync_api.expect(page.locator("#try-model")).to_have_value("my-lora")
    finally:
        vllm.httpd.shutdown()
        vllm.httpd.server_close()
