"""Notebooks idle on their GPU stop by their policy; what the notebook server reports of its own
use is a second signal, heard only where it can be reached."""

from __future__ import annotations

import datetime as dt
import socket
import threading

import pytest
from django.utils import timezone

from jobs import access, idle, reclaim, services, sync
from jobs.models import Workload, WorkloadIdleState, WorkloadKind
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent, Notification
from tests.helpers import launch
from tests.jobs.conftest import JupyterStatus

pytestmark = pytest.mark.django_db


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


def _idle_gpu(gpu_metrics, workload: Workload, percent: float = 0.5) -> None:
    pod = workload.intervals.get(ended_at__isnull=True).pod_name
    gpu_metrics.set_engine_active(namespace=workload.team.namespace, pod=pod, percent=percent)


def _ago(minutes: float) -> str:
    return (timezone.now() - dt.timedelta(minutes=minutes)).isoformat()


@pytest.fixture
def reporting(running_notebook, simulated, gpu_metrics):
    """The notebook's pod has reported to the exporter (its first scrape is 15 s after it starts)."""
    simulated.advance(20)
    return gpu_metrics


def test_a_notebook_idle_on_its_gpu_and_in_jupyter_is_warned_then_stopped_and_its_objects_removed(
        running_notebook, jupyter, reporting, django_capture_on_commit_callbacks):
    _idle_gpu(reporting, running_notebook)
    jupyter.status = {"last_activity": _ago(180), "kernels": 1, "connections": 0}
    t0 = timezone.now()
    assert reclaim.idle_sweep(now=t0).idle == [running_notebook.pk]
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == [running_notebook.pk]  # its 60-minute limit
    note = Notification.objects.get(recipient=running_notebook.owner)
    assert "has been idle 61 min" in note.message and "unless you keep it running" in note.message
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=77)).stopped == [running_notebook.pk]  # 15-minute grace
    running_notebook.refresh_from_db()
    assert running_notebook.phase == Workload.Phase.STOPPED
    assert running_notebook.reason.startswith("Stopped: idle 77 minutes with its GPUs under 5 % engine active")
    assert gateway().get(ObjectRef("apps/v1", "StatefulSet", running_notebook.k8s_name, "vision")) is None
    assert AuditEvent.objects.filter(action="workload.stopped_idle").exists()
    assert set(jupyter.tokens) == {access.notebook_token(running_notebook)}


def test_a_notebook_used_in_jupyter_without_its_gpu_is_not_warned(running_notebook, jupyter, reporting):
    _idle_gpu(reporting, running_notebook)
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    jupyter.status = {"last_activity": (t0 + dt.timedelta(minutes=58)).isoformat(), "kernels": 1, "connections": 0}
    assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == []
    state = WorkloadIdleState.objects.get(workload=running_notebook)
    assert state.idle_since == t0 + dt.timedelta(minutes=61) and state.warned_at is None
    assert jupyter.tokens == [access.notebook_token(running_notebook)]


def test_a_notebook_the_portal_cannot_reach_is_judged_by_its_gpu_alone(running_notebook, settings, reporting):
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    _idle_gpu(reporting, running_notebook)
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == [running_notebook.pk]


def test_a_notebook_busy_on_its_gpu_is_not_idle_whatever_jupyter_says(running_notebook, jupyter, reporting):
    _idle_gpu(reporting, running_notebook, percent=64)
    jupyter.status = {"last_activity": _ago(600), "kernels": 0, "connections": 0}
    t0 = timezone.now()
    for minutes in (0, 61, 200):
        sweep = reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=minutes))
        assert sweep.busy == [running_notebook.pk] and sweep.warned == []
    assert jupyter.tokens == []  # the GPU decides: the notebook server was never asked


# --- What the notebook server says (the second signal) ---------------------------------------------


@pytest.mark.parametrize("status", [
    {"last_activity": "recent", "kernels": 0, "connections": 0},
    {"last_activity": "2000-01-01T00:00:00Z", "kernels": 1, "connections": 1},
])
def test_a_notebook_in_use_says_so(running_notebook, jupyter, status):
    if status["last_activity"] == "recent":
        status = {**status, "last_activity": _ago(5)}
    jupyter.status = status
    activity = idle.notebook_activity(running_notebook)
    assert activity.last_activity is not None and timezone.now() - activity.last_activity < dt.timedelta(minutes=6)
    assert jupyter.tokens == [access.notebook_token(running_notebook)]


def test_a_notebook_the_portal_cannot_reach_is_unreachable_in_words(running_notebook, settings):
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    activity = idle.notebook_activity(running_notebook)
    assert activity.last_activity is None and "refused" in activity.unreachable.lower()


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
def test_a_notebook_answering_garbage_is_unreadable_not_idle(running_notebook, jupyter, answer):
    jupyter.answers = {running_notebook.k8s_name: answer}
    activity = idle.notebook_activity(running_notebook)
    assert activity.last_activity is None and activity.unreadable and not activity.unreachable


def test_a_notebook_that_answers_too_late_is_unreachable(running_notebook, jupyter):
    jupyter.delays = {running_notebook.k8s_name: 4}
    assert idle.notebook_activity(running_notebook) == idle.NotebookActivity(unreachable="no answer within 3 s")


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
        activity = idle.notebook_activity(running_notebook)
    finally:
        server.close()
    assert activity == idle.NotebookActivity(unreadable="it did not answer in HTTP (BadStatusLine)")


# --- A VS Code workspace: code-server's /healthz says when it was last used --------------------------


@pytest.fixture
def running_workspace(ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks):
    template = services.template_create(user=admin_user, slug="vscode", name="VS Code", kind=WorkloadKind.WORKSPACE,
                                        flavors=[flavor], image="codercom/code-server:4.96.4", port=8080, idle_minutes=60)
    with django_capture_on_commit_callbacks(execute=True):
        workspace = launch(member, ready_team, template, flavor)
    simulated.advance(20)
    sync.sync_all()
    workspace.refresh_from_db()
    assert workspace.phase == Workload.Phase.RUNNING
    return workspace


@pytest.fixture
def code_server(settings):
    server = JupyterStatus()  # the same answering server: the test sets what /healthz says
    settings.PORTAL_WORKSPACE_STATUS_URL = server.url.replace("/api/status", "/healthz")
    yield server
    server.httpd.shutdown()


def test_a_workspace_used_in_code_server_without_its_gpu_is_not_warned(running_workspace, code_server, gpu_metrics):
    _idle_gpu(gpu_metrics, running_workspace)
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    beat = t0 + dt.timedelta(minutes=58)
    code_server.status = {"status": "expired", "lastHeartbeat": int(beat.timestamp() * 1000)}
    assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == []
    assert idle.notebook_activity(running_workspace).last_activity == beat.replace(microsecond=beat.microsecond // 1000 * 1000)


def test_a_workspace_nobody_used_is_judged_by_its_gpu(running_workspace, code_server, gpu_metrics):
    _idle_gpu(gpu_metrics, running_workspace)
    code_server.status = {"status": "expired", "lastHeartbeat": 0}
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == [running_workspace.pk]
    assert idle.notebook_activity(running_workspace) == idle.NotebookActivity(unreadable="nobody has used it since it started")


@pytest.mark.parametrize("status", [{"lastHeartbeat": "yesterday"}, {"lastHeartbeat": True}, {"lastHeartbeat": -5}, {}])
def test_a_workspace_answering_garbage_is_unreadable_not_idle(running_workspace, code_server, status):
    code_server.status = status
    assert "is not a time in milliseconds" in idle.notebook_activity(running_workspace).unreadable
