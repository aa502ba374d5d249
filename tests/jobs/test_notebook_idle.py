"""Notebooks stop after their idle limit, judged by what the notebook server reports."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from jobs import access, idle, services, sync
from jobs.models import Workload, WorkloadKind
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tests.helpers import launch

pytestmark = pytest.mark.django_db


class JupyterStatus:
    """Answers /api/status like a Jupyter server, with the activity the test sets."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.tokens: list[str] = []
        # A notebook whose name is a key here gets this answer (HTTP status, body) instead.
        self.answers: dict[str, tuple[int, bytes]] = {}
        # A notebook whose name is a key here answers only after this many seconds.
        self.delays: dict[str, float] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.tokens.append(self.path.split("token=")[-1])
                code, data = 200, json.dumps(owner.status).encode()
                for name, seconds in owner.delays.items():
                    if f"/{name}/" in self.path:
                        time.sleep(seconds)
                for name, answer in owner.answers.items():
                    if f"/{name}/" in self.path:
                        code, data = answer
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{{namespace}}/{{name}}/api/status"


@pytest.fixture
def jupyter(settings):
    server = JupyterStatus()
    settings.PORTAL_NOTEBOOK_STATUS_URL = server.url
    yield server
    server.httpd.shutdown()


@pytest.fixture
def running_notebook(ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks):
    template = services.template_create(user=admin_user, slug="jupyterlab", name="JupyterLab", kind=WorkloadKind.NOTEBOOK,
                                        flavors=[flavor], image="quay.io/jupyter/pytorch-notebook", port=8888, idle_minutes=60)
    with django_capture_on_commit_callbacks(execute=True):
        notebook = launch(member, ready_team, template, flavor)
    simulated.advance(1)
    sync.sync_all()
    notebook.refresh_from_db()
    assert notebook.phase == Workload.Phase.RUNNING
    return notebook


def test_a_notebook_idle_past_its_limit_is_stopped_and_its_objects_removed(running_notebook, jupyter,
                                                                           django_capture_on_commit_callbacks):
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 1, "connections": 0}
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.notebooks_stop_idle() == [running_notebook.pk]
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.STOPPED
    assert running_notebook.reason.startswith("Stopped after 95 minutes idle")
    assert gateway().get(ObjectRef("apps/v1", "StatefulSet", running_notebook.k8s_name, "vision")) is None
    assert AuditEvent.objects.filter(action="workload.stopped_idle").exists()
    assert jupyter.tokens == [access.notebook_token(running_notebook)]


@pytest.mark.parametrize("status", [
    {"last_activity": "recent", "kernels": 0, "connections": 0},
    {"last_activity": "2000-01-01T00:00:00Z", "kernels": 1, "connections": 1},
])
def test_a_notebook_in_use_keeps_running(running_notebook, jupyter, status):
    if status["last_activity"] == "recent":
        status = {**status, "last_activity": (timezone.now() - dt.timedelta(minutes=5)).isoformat()}
    jupyter.status = status
    assert idle.notebooks_stop_idle() == []
    assert jupyter.tokens == [access.notebook_token(running_notebook)]  # asked, and answered "in use"


def test_a_notebook_that_does_not_answer_is_left_running(running_notebook, settings):
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    assert idle.notebooks_stop_idle() == []
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.RUNNING


@pytest.mark.parametrize("answer", [
    (200, b"<html>Welcome to nginx</html>"),
    (200, b"{}"),
    (200, b'{"kernels": 0, "connections": 0}'),
    (200, b'{"last_activity": 1700000000}'),
    (200, b'{"last_activity": ["2000-01-01T00:00:00Z"]}'),
    (200, b'{"last_activity": "2000-13-45T99:00:00Z"}'),
    (200, b'{"last_activity": "2000-01-01T00:00:00"}'),
    (200, b'["2000-01-01T00:00:00Z"]'),
    (200, b"null"),
    (500, b"Internal Server Error"),
], ids=["html", "empty-object", "no-last-activity", "number", "list-time", "impossible-date", "no-zone", "list",
        "null", "http-500"])
def test_a_notebook_answering_garbage_is_left_running_and_the_idle_one_is_still_stopped(
        running_notebook, jupyter, django_capture_on_commit_callbacks, answer):
    broken = launch(running_notebook.owner, running_notebook.team, running_notebook.template_version.template,
                    running_notebook.flavor)
    Workload.objects.filter(pk=broken.pk).update(phase=Workload.Phase.RUNNING)
    jupyter.answers = {broken.k8s_name: answer}
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 0, "connections": 0}
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.notebooks_stop_idle() == [running_notebook.pk]
    running_notebook.refresh_from_db()
    broken.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.STOPPED
    assert broken.phase == Workload.Phase.RUNNING


def test_an_error_checking_one_notebook_is_logged_and_the_others_are_still_checked(
        running_notebook, jupyter, monkeypatch, caplog):
    other = launch(running_notebook.owner, running_notebook.team, running_notebook.template_version.template,
                   running_notebook.flavor)
    Workload.objects.filter(pk=other.pk).update(phase=Workload.Phase.RUNNING)
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 0, "connections": 0}
    real = idle.notebook_last_activity

    def fails_for_the_first(workload: Workload) -> dt.datetime | None:
        if workload.pk == running_notebook.pk:
            raise RuntimeError("the status answer broke something unforeseen")
        return real(workload)

    monkeypatch.setattr(idle, "notebook_last_activity", fails_for_the_first)
    assert idle.notebooks_stop_idle() == [other.pk]
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.RUNNING
    assert f"notebook {running_notebook.pk} ({running_notebook.k8s_name} of vision)" in caplog.text


def test_a_notebook_that_answers_too_late_is_left_running_and_the_idle_one_is_still_stopped(
        running_notebook, jupyter, django_capture_on_commit_callbacks):
    slow = launch(running_notebook.owner, running_notebook.team, running_notebook.template_version.template,
                  running_notebook.flavor)
    Workload.objects.filter(pk=slow.pk).update(phase=Workload.Phase.RUNNING)
    jupyter.delays = {slow.k8s_name: 4}
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 0, "connections": 0}
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.notebooks_stop_idle() == [running_notebook.pk]
    slow.refresh_from_db()
    assert slow.phase == Workload.Phase.RUNNING
