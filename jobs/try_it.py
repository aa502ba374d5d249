"""The inference server page's "Try it" box: one chat request to the OpenAI-compatible API the
server serves (vLLM's `/v1/models` and `/v1/chat/completions`), asked by the portal through the
server's Service (PORTAL_INFERENCE_URL), never by the browser: the portal's session never reaches
the server's host, and its answer is shown as text. The team's NetworkPolicy
`gpu-portal-allow-portal` admits the portal's pods to the kinds that have such a box
(`Kind.try_it`), as to the servers it asks how idle they are.

Whoever may open the server may try it (its team). A question waits for the server's answer in
the web request, `TIMEOUT_SECONDS` at most for the model list and the answer together (under
gunicorn's 30 s, which would end the worker), so each person may ask `RATE` times a minute."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from jobs.models import Workload
from portal import limits
from portal.errors import DomainError, StateConflict
from portal.models import User

MAX_PROMPT = 8000  # characters
MAX_TOKENS = 1024
DEFAULT_TOKENS = 256
MAX_MODEL = 200
TIMEOUT_SECONDS = 20
MAX_ANSWER_BYTES = 2_000_000
RATE = 10  # questions a minute, per person


@dataclass(frozen=True)
class Question:
    prompt: str
    model: str = ""  # empty: the first model the server lists
    max_tokens: int = DEFAULT_TOKENS


@dataclass(frozen=True)
class Reply:
    model: str
    text: str
    finish_reason: str  # "stop", or "length" where max_tokens cut it short
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float


def checked(*, prompt: Any, model: Any, max_tokens: Any) -> Question:
    """What the box sent, read and bounded; a refusal names its field."""
    prompt = prompt.strip() if isinstance(prompt, str) else ""
    if not prompt:
        raise DomainError("Write something to ask the model.", field="prompt")
    if len(prompt) > MAX_PROMPT:
        raise DomainError(f"Ask in at most {MAX_PROMPT:,} characters; this is {len(prompt):,}.", field="prompt")
    model = model.strip() if isinstance(model, str) else ""
    if len(model) > MAX_MODEL or any(not c.isprintable() for c in model):
        raise DomainError(f"A model's name is at most {MAX_MODEL} printable characters.", field="model")
    try:
        tokens = int(max_tokens) if max_tokens not in (None, "") else DEFAULT_TOKENS
    except (TypeError, ValueError):
        raise DomainError("Most tokens is a whole number.", field="max_tokens") from None
    if not 1 <= tokens <= MAX_TOKENS:
        raise DomainError(f"Most tokens is between 1 and {MAX_TOKENS}.", field="max_tokens")
    return Question(prompt=prompt, model=model, max_tokens=tokens)


def ask(*, user: User, workload: Workload, question: Question) -> Reply:
    """The server's answer to one question. The caller has checked `jobs.open_workload`."""
    if not workload.kind_facts.try_it:
        raise DomainError(f"A {workload.kind_facts.noun} serves no API to try here.")
    if workload.phase != Workload.Phase.RUNNING:
        raise StateConflict(f"{workload.name} is {workload.get_phase_display().lower()}: try it once it runs.")
    outcome = limits.hit(key=f"try-it:{user.pk}", count=RATE, seconds=60)
    if not outcome.allowed:
        raise limits.RateLimited(f"You may ask {RATE} questions a minute; try again in "
                                 f"{limits.in_words(outcome.retry_after)}.", retry_after=outcome.retry_after)
    base = server_url(workload)
    began = time.monotonic()
    deadline = began + TIMEOUT_SECONDS
    model = question.model or _first_model(base, deadline)
    answer = _call(f"{base}/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": question.prompt}],
        "max_tokens": question.max_tokens, "stream": False,
    }, deadline)
    return _reply(answer, model=model, seconds=time.monotonic() - began)


def server_url(workload: Workload) -> str:
    return settings.PORTAL_INFERENCE_URL.format(name=workload.k8s_name, namespace=workload.team.namespace).rstrip("/")


def _first_model(base: str, deadline: float) -> str:
    listed = _call(f"{base}/v1/models", None, deadline)
    models = listed.get("data") if isinstance(listed, dict) else None
    first = models[0] if isinstance(models, list) and models else None
    if not isinstance(first, dict) or not isinstance(first.get("id"), str) or not first["id"]:
        raise DomainError("The server lists no model at /v1/models: is it an OpenAI-compatible server? Name the model.",
                          field="model")
    return str(first["id"])


def _call(url: str, body: dict[str, Any] | None, deadline: float) -> Any:
    """One request to the server, its JSON answer, by the deadline; every way it fails, in words."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=max(deadline - time.monotonic(), 0.5)) as response:  # noqa: S310 - the site's own config
            raw = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise DomainError(f"The server answered HTTP {error.code}{_said(error)}.") from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise DomainError(f"The server did not answer within {TIMEOUT_SECONDS} s. Ask for fewer tokens, "
                              "or try again when it is less busy.") from None
        raise DomainError(f"The portal could not reach the server ({error.reason}). It may still be loading its "
                          "model: try again in a minute.") from None
    except TimeoutError:
        raise DomainError(f"The server did not answer within {TIMEOUT_SECONDS} s. Ask for fewer tokens, "
                          "or try again when it is less busy.") from None
    except (http.client.HTTPException, OSError) as error:
        raise DomainError(f"The server's answer broke off ({type(error).__name__}).") from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise DomainError("The server's answer is larger than the box shows (2 MB): ask for fewer tokens.")
    try:
        return json.loads(raw)
    except ValueError:
        raise DomainError("The server's answer is not JSON: is it an OpenAI-compatible server?") from None


def _said(error: urllib.error.HTTPError) -> str:
    """What the server said with its error (vLLM: {"error": {"message"}}; others: message, detail), shortened."""
    try:
        body = json.loads(error.read(20_000))
    except (ValueError, OSError):
        return ""
    said = body.get("error") if isinstance(body, dict) else None
    said = said.get("message") if isinstance(said, dict) else said
    if not isinstance(said, str) and isinstance(body, dict):
        said = body.get("message") or body.get("detail")
    if not isinstance(said, str) or not said.strip():
        return ""
    said = " ".join(said.split()).rstrip(".")  # the sentence it goes in ends it
    return f": {said[:300]}{'…' if len(said) > 300 else ''}"


def _reply(answer: Any, *, model: str, seconds: float) -> Reply:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise DomainError("The server's answer is not an OpenAI chat completion (no choices[0].message.content).")
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return Reply(
        model=str(answer.get("model") or model), text=text, finish_reason=str(choice.get("finish_reason") or ""),  # type: ignore[union-attr]
        prompt_tokens=_count(usage.get("prompt_tokens")), completion_tokens=_count(usage.get("completion_tokens")),
        seconds=seconds,
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
