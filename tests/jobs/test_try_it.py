"""An inference server page's Try it box (jobs/try_it.py): the portal asks the server's
OpenAI-compatible API one question and shows its answer; here a stand-in on loopback answers as
vLLM does, at the address PORTAL_INFERENCE_URL names for that server."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.urls import reverse

from jobs import services, try_it
from jobs.models import Workload, WorkloadKind
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import launch

pytestmark = pytest.mark.django_db


class StandIn:
    """vLLM's /v1/models and /v1/chat/completions, answering what the test says, and keeping what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, Any]] = []  # (method, path, JSON body)
        self.status, self.answer = 200, b""
        self.delay = 0.0  # seconds before it answers a question
        self.models: list[str] = ["meta-llama/Llama-3.1-8B-Instruct"]
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                stand_in.asked.append(("GET", self.path, None))
                if self.path.endswith("/v1/models"):
                    self._reply(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"}
                                                                             for m in stand_in.models]}).encode())
                else:
                    self._reply(404, b'{"detail": "Not Found"}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.asked.append(("POST", self.path, body))
                if stand_in.delay:
                    time.sleep(stand_in.delay)  # a server busy generating: the portal gives up first
                if stand_in.status != 200 or stand_in.answer:
                    self._reply(stand_in.status, stand_in.answer)
                    return
                text = f"You asked: {body['messages'][0]['content']}"
                self._reply(200, json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
                }).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def vllm(settings) -> Iterator[StandIn]:
    server = StandIn()
    settings.PORTAL_INFERENCE_URL = server.base + "/{namespace}/{name}"
    settings.PORTAL_CLUSTER = "kubernetes"  # the box is offered where servers really run
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def server(ready_team, member, admin_user, flavor) -> Workload:
    template = services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE,
                                        flavors=[flavor], image="vllm/vllm-openai:0.6", port=8000, parameters=[])
    workload = launch(member, ready_team, template, flavor)
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.RUNNING)
    workload.refresh_from_db()
    return workload


def ask(client: Any, workload: Workload, **form: Any) -> Any:
    return client.post(reverse("jobs:workload-try", args=[workload.pk]), form, HTTP_HX_REQUEST="true")


def test_a_member_asks_the_server_and_reads_its_answer_as_text(vllm, server, team):
    teammate = UserFactory(username="tom")
    MembershipFactory(team=team, user=teammate)
    page = login(teammate).get(reverse("jobs:workload-detail", args=[server.pk]))
    assert b'data-testid="try-form"' in page.content

    answer = ask(login(teammate), server, prompt="What is <b>2+2</b>?", max_tokens="64")
    assert answer.status_code == 200
    body = answer.content.decode()
    # The server's words are shown as text, never as markup.
    assert "You asked: What is &lt;b&gt;2+2&lt;/b&gt;?" in body and "<b>2+2</b>" not in body.split("</textarea>")[1]
    assert "meta-llama/Llama-3.1-8B-Instruct" in body and "7 tokens" in body and "cut short" in body
    # It asked that server (its namespace and name in the address), the first model it lists, as asked.
    (_, models_path, _), (method, path, sent) = vllm.asked
    assert models_path == f"/{team.namespace}/{server.k8s_name}/v1/models"
    assert (method, path) == ("POST", f"/{team.namespace}/{server.k8s_name}/v1/chat/completions")
    assert sent == {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 64, "stream": False,
                    "messages": [{"role": "user", "content": "What is <b>2+2</b>?"}]}


def test_a_named_model_is_asked_without_listing_first(vllm, server, member):
    ask(login(member), server, prompt="hi", model="my-lora")
    assert [(m, p.rsplit("/", 2)[-2:]) for m, p, _ in vllm.asked] == [("POST", ["chat", "completions"])]
    assert vllm.asked[0][2]["model"] == "my-lora" and vllm.asked[0][2]["max_tokens"] == try_it.DEFAULT_TOKENS


@pytest.mark.parametrize(("form", "field", "words"), [
    ({"prompt": "  "}, "prompt", "Write something to ask"),
    ({"prompt": "x" * 8001}, "prompt", "at most 8,000 characters"),
    ({"prompt": "hi", "max_tokens": "5000"}, "max_tokens", "between 1 and 1024"),
    ({"prompt": "hi", "max_tokens": "lots"}, "max_tokens", "whole number"),
    ({"prompt": "hi", "model": "a\nb"}, "model", "printable"),
])
def test_what_the_box_refuses_is_said_beside_it_and_nothing_is_asked(vllm, server, member, form, field, words):
    body = ask(login(member), server, **form).content.decode()
    assert words in body and 'id="try-error"' in body
    (tag,) = re.findall(rf'<(?:input|textarea)[^>]*name="{field}"[^>]*>', body)
    assert 'aria-invalid="true"' in tag  # the field is marked, and points at the words
    assert vllm.asked == []


@pytest.mark.parametrize(("status", "answer", "words"), [
    (400, b'{"object": "error", "message": "This model\'s maximum context length is 2048 tokens.", "code": 400}',
     "The server answered HTTP 400: This model's maximum context length is 2048 tokens."),
    (404, b'{"error": {"message": "The model `x` does not exist."}}', "HTTP 404: The model `x` does not exist."),
    (500, b"<html>oops</html>", "The server answered HTTP 500."),
    (200, b"not json", "not JSON"),
    (200, b'{"choices": []}', "not an OpenAI chat completion"),
])
def test_a_server_answering_wrongly_is_said_in_words(vllm, server, member, status, answer, words):
    vllm.status, vllm.answer = status, answer
    body = ask(login(member), server, prompt="hi", model="x").content.decode()
    assert words.replace("'", "&#x27;") in body, body
    assert ".." not in body.split('id="try-error"')[1].split("</p>")[0]  # one full stop, the sentence's


def test_a_server_nobody_answers_at_is_said_in_words(vllm, server, member, settings):
    settings.PORTAL_INFERENCE_URL = "http://127.0.0.1:9/{name}"  # discard: nothing listens
    body = ask(login(member), server, prompt="hi").content.decode()
    assert "The portal could not reach the server" in body and "try again in a minute" in body


def test_a_server_slower_than_the_portal_waits_is_said_in_words(vllm, server, member, monkeypatch):
    monkeypatch.setattr(try_it, "TIMEOUT_SECONDS", 0.5)
    vllm.delay = 10
    client = login(member)
    began = time.monotonic()
    body = ask(client, server, prompt="hi", model="m").content.decode()
    assert "The server did not answer within 0.5 s" in body
    assert time.monotonic() - began < vllm.delay  # the wait ended at the deadline, not at the server's answer


def test_the_answer_says_where_programs_ask_the_same_where_the_server_has_an_address(vllm, server, member, settings):
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"
    body = ask(login(member), server, prompt="hi", model="m").content.decode()
    assert f"https://{services.ingress_host(server)}/v1/chat/completions" in body or \
        f"http://{services.ingress_host(server)}/v1/chat/completions" in body


def test_only_a_running_server_of_the_team_is_asked(vllm, server, member, outsider, finance_user, admin_user):
    assert ask(login(outsider), server, prompt="hi").status_code == 404
    assert ask(login(finance_user), server, prompt="hi").status_code == 403
    assert ask(login(admin_user), server, prompt="hi").status_code == 403  # seeing it is not using it
    assert b'data-testid="try-form"' not in login(admin_user).get(reverse("jobs:workload-detail", args=[server.pk])).content
    Workload.objects.filter(pk=server.pk).update(phase=Workload.Phase.QUEUED)
    assert "try it once it runs" in ask(login(member), server, prompt="hi").content.decode()
    assert vllm.asked == []


def test_a_notebook_has_no_box(vllm, ready_team, member, admin_user, flavor):
    template = services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                        flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])
    notebook = launch(member, ready_team, template, flavor)
    assert ask(login(member), notebook, prompt="hi").status_code == 404
    assert b'id="try-it"' not in login(member).get(reverse("jobs:workload-detail", args=[notebook.pk])).content


def test_each_person_asks_at_most_ten_questions_a_minute(vllm, server, member, monkeypatch):
    from portal import limits

    monkeypatch.setattr(limits, "clock", lambda: 1_800_000_030.0)  # mid-minute: no window ends during the test
    client = login(member)
    for _ in range(try_it.RATE):
        assert "You asked" in ask(client, server, prompt="hi", model="m").content.decode()
    assert "You may ask 10 questions a minute" in ask(client, server, prompt="hi", model="m").content.decode()
    assert len(vllm.asked) == try_it.RATE


def test_the_portal_may_reach_inference_pods_to_ask_them():
    from jobs import kinds

    assert "inference" in kinds.network_reach().portal_reached
