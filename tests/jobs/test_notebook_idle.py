"""Notebooks stop after their idle limit, judged by what the notebook server reports."""

from __future__ import annotations

import datetime as dt
import json
import socket
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
        assert idle.notebooks_stop_idle() == idle.IdlePass(stopped=[running_notebook.pk])
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
    assert idle.notebooks_stop_idle() == idle.IdlePass()  # nothing stopped, nothing it could not judge
    assert jupyter.tokens == [access.notebook_token(running_notebook)]  # asked, and answered "in use"


def test_a_notebook_the_portal_cannot_reach_is_left_running_and_the_pass_says_so(running_notebook, settings, caplog):
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    settings.PORTAL_NAMESPACE = "platform"
    settings.PORTAL_POD_LABELS = (("app.kubernetes.io/name", "gpu-portal"),)

    result = idle.notebooks_stop_idle()

    assert result.stopped == [] and result.unreadable == {}
    assert list(result.unreachable) == [running_notebook.pk]
    assert "refused" in result.unreachable[running_notebook.pk].lower()
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.RUNNING
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"notebook {running_notebook.pk} ({running_notebook.k8s_name} of vision) could not be reached" in w
               for w in warnings)
    assert any("could not reach 1 notebook(s)" in w and "from namespace platform" in w
               and "app.kubernetes.io/name=gpu-portal" in w for w in warnings)
    assert access.notebook_token(running_notebook) not in caplog.text


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
        result = idle.notebooks_stop_idle()
    assert result.stopped == [running_notebook.pk]
    assert list(result.unreadable) == [broken.pk] and result.unreachable == {}  # it was reached: it answered
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
    real = idle.notebook_activity

    def fails_for_the_first(workload: Workload) -> idle.NotebookActivity:
        if workload.pk == running_notebook.pk:
            raise RuntimeError("the status answer broke something unforeseen")
        return real(workload)

    monkeypatch.setattr(idle, "notebook_activity", fails_for_the_first)
    assert idle.notebooks_stop_idle() == idle.IdlePass(stopped=[other.pk], failed=[running_notebook.pk])
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
        result = idle.notebooks_stop_idle()
    assert result.stopped == [running_notebook.pk]
    assert result.unreachable == {slow.pk: "no answer within 3 s"}
    slow.refresh_from_db()
    assert slow.phase == Workload.Phase.RUNNING


def test_a_notebook_answering_something_other_than_http_is_unreadable_not_unreachable(running_notebook, settings):
    server = socket.create_server(("127.0.0.1", 0))

    def answer_garbage() -> None:
        connection, _ = server.accept()
        connection.recv(4096)
        connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        connection.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    settings.PORTAL_NOTEBOOK_STATUS_URL = f"http://127.0.0.1:{server.getsockname()[1]}/{{namespace}}/{{name}}"
    try:
        result = idle.notebooks_stop_idle()
    finally:
        server.close()
    assert result.unreadable == {running_notebook.pk: "it did not answer in HTTP (BadStatusLine)"}
    assert result.stopped == [] and result.unreachable == {} and result.failed == []


# --- The GPU signal (issue 10 registers its source) -------------------------------------------------


@pytest.fixture
def gpu_activity():
    """Registers a GPU source that answers what the test sets, and unregisters it afterwards."""
    busy: dict[int, dt.datetime | None] = {}
    asked: list[int] = []

    def source(workload: Workload) -> dt.datetime | None:
        asked.append(workload.pk)
        return busy.get(workload.pk)

    idle.register_gpu_activity(source)
    yield busy, asked
    idle.register_gpu_activity(None)


def test_a_gpu_busy_more_recently_keeps_a_notebook_its_server_calls_idle(running_notebook, jupyter, gpu_activity):
    busy, asked = gpu_activity
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 1, "connections": 0}
    busy[running_notebook.pk] = timezone.now() - dt.timedelta(minutes=2)

    assert idle.notebooks_stop_idle() == idle.IdlePass()
    assert asked == [running_notebook.pk]
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.RUNNING


def test_a_gpu_idle_as_long_does_not_spare_the_notebook(running_notebook, jupyter, gpu_activity,
                                                         django_capture_on_commit_callbacks):
    busy, _ = gpu_activity
    jupyter.status = {"last_activity": (timezone.now() - dt.timedelta(minutes=95)).isoformat(), "kernels": 1, "connections": 0}
    busy[running_notebook.pk] = timezone.now() - dt.timedelta(minutes=200)

    with django_capture_on_commit_callbacks(execute=True):
        assert idle.notebooks_stop_idle().stopped == [running_notebook.pk]
    running_notebook.refresh_from_db()
    assert running_notebook.reason.startswith("Stopped after 95 minutes idle")  # the later of the two signals


def test_the_gpu_signal_never_vouches_for_a_notebook_the_portal_cannot_reach(running_notebook, settings, gpu_activity):
    busy, asked = gpu_activity
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    busy[running_notebook.pk] = timezone.now() - dt.timedelta(days=3)

    result = idle.notebooks_stop_idle()

    assert list(result.unreachable) == [running_notebook.pk] and result.stopped == []
    assert asked == []  # neither idle nor in use: the GPU is not asked to decide for it
