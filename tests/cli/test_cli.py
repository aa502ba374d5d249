"""The command-line client (cli/), end to end: the `gpu-portal` program, run as a person runs it,
against a live test server on the simulated cluster, with an API token.

Invariants: every command answers in words or, with --output json, in the API's own data; a
refusal goes to standard error with the portal's words and an exit code a script can test; the
token is kept readable by its owner only; `logs --follow` prints each new line once, soon after
the pod writes it, and stops when the workload ends."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobs import services, sync
from jobs.models import Workload
from portal import tokens
from portal.kube.simulated import SimulatedGateway
from tests.helpers import launch, make_ready

pytestmark = [pytest.mark.django_db(transaction=True)]

CLI = Path(__file__).resolve().parents[2] / "cli" / "src"
# The exit codes the client promises (cli/src/gpu_portal_cli/client.py).
OK, REFUSED, USAGE, NOT_SIGNED_IN, FORBIDDEN, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4, 5, 6


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


def run(home: Path, *args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPU_PORTAL_")}
    env.update(PYTHONPATH=str(CLI), XDG_CONFIG_HOME=str(home), HOME=str(home))
    return subprocess.run([sys.executable, "-m", "gpu_portal_cli", *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture
def signed_in(home: Path, live_server: Any, member: Any, ready_team: Any) -> Path:
    _, secret = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    done = run(home, "login", "--url", live_server.url, stdin=secret + "\n")
    assert done.returncode == OK, done.stderr
    return home


@pytest.fixture
def cluster_moves(simulated: SimulatedGateway) -> Iterator[None]:
    """The simulated cluster moving on its own, as a real one does, with the status sync following it."""
    stop = threading.Event()

    def move() -> None:
        try:
            while not stop.is_set():
                simulated.advance(1)
                sync.sync_all()
                stop.wait(0.2)
        finally:
            connection.close()  # this thread's own: the test database is dropped at the end

    mover = threading.Thread(target=move, daemon=True)
    mover.start()
    yield
    stop.set()
    mover.join(timeout=10)


def test_login_keeps_the_token_for_its_owner_only_and_a_bad_one_is_refused(home, live_server, member, ready_team):
    refused = run(home, "login", "--url", live_server.url, "--token", "gpp_not-a-token")
    assert refused.returncode == NOT_SIGNED_IN and "did not accept your token" in refused.stderr
    assert not (home / "gpu-portal" / "config.json").exists()

    _, secret = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    done = run(home, "login", "--url", live_server.url, stdin=secret + "\n")
    assert done.returncode == OK and "you see 1 team" in done.stdout
    kept = home / "gpu-portal" / "config.json"
    assert kept.stat().st_mode & 0o777 == 0o600 and json.loads(kept.read_text())["token"] == secret
    assert secret not in done.stdout + done.stderr

    assert run(home, "logout").returncode == OK and not kept.exists()
    after = run(home, "teams")
    assert after.returncode == NOT_SIGNED_IN and "You are not signed in" in after.stderr


def test_teams_templates_and_quota_in_words_and_in_json(signed_in, training, flavor, ready_team):
    teams = run(signed_in, "teams")
    assert teams.returncode == OK and "vision" in teams.stdout and teams.stdout.startswith("TEAM")
    listed = json.loads(run(signed_in, "templates", "--output", "json").stdout)
    assert [template["slug"] for template in listed] == ["pytorch-train"]

    asked = run(signed_in, "-o", "json", "request-quota", "--team", "vision", "--flavor", flavor.slug, "--units", "2",
                "--reason", "A second detector")
    assert asked.returncode == OK, asked.stderr
    request = json.loads(asked.stdout)
    assert (request["team"], request["status"]) == ("vision", "pending")
    assert f"{request['id']}" in run(signed_in, "quota", "--status", "pending").stdout
    bad = run(signed_in, "request-quota", "--team", "vision", "--flavor", "b200", "--units", "1", "--reason", "x")
    assert bad.returncode == USAGE and "There is no flavor “b200”" in bad.stderr


def test_launch_status_list_stop_and_relaunch(signed_in, training, flavor, ready_team, cluster_moves):
    launched = run(signed_in, "-o", "json", "launch", "pytorch-train", "--team", "vision", "--flavor", flavor.slug,
                   "--units", "1", "--name", "detector", "-p", "epochs=3", "--wait")
    assert launched.returncode == OK, launched.stderr
    workload = json.loads(launched.stdout)
    assert (workload["name"], workload["phase"]) == ("detector", "running")
    assert "detector: " in launched.stderr  # progress while it waited, on standard error

    shown = run(signed_in, "status", str(workload["id"]))
    assert shown.returncode == OK and f"detector (#{workload['id']}) of vision: running" in shown.stdout
    assert "detector" in run(signed_in, "list", "--mine").stdout

    stopped = run(signed_in, "stop", str(workload["id"]))
    assert stopped.returncode == OK and f"Stopping detector (#{workload['id']})" in stopped.stdout
    again = json.loads(run(signed_in, "-o", "json", "relaunch", str(workload["id"])).stdout)
    assert again["relaunch_of"] == workload["id"] and again["name"] == "detector"


def test_refusals_say_why_with_an_exit_code_a_script_can_test(signed_in, training, flavor, ready_team, other_team,
                                                              admin_user):
    too_many = run(signed_in, "launch", "pytorch-train", "--team", "vision", "--flavor", flavor.slug, "--units", "99")
    assert too_many.returncode == REFUSED and "units" in too_many.stderr.lower() and too_many.stdout == ""
    bad_param = run(signed_in, "launch", "pytorch-train", "--team", "vision", "--flavor", flavor.slug, "-p", "epochs")
    assert bad_param.returncode == USAGE and "Write a parameter as name=value" in bad_param.stderr
    theirs = launch(admin_user, make_ready(other_team, flavor), training, flavor)
    hidden = run(signed_in, "status", str(theirs.pk))
    assert hidden.returncode == NOT_FOUND
    as_json = run(signed_in, "-o", "json", "status", str(theirs.pk))
    assert json.loads(as_json.stderr)["exit_code"] == NOT_FOUND
    assert run(signed_in, "launch").returncode == USAGE  # argparse's own words for a missing argument


def test_a_portal_that_does_not_answer_is_said_so(home):
    (home / "gpu-portal").mkdir()
    (home / "gpu-portal" / "config.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "gpp_x"}))
    done = run(home, "teams")
    assert done.returncode == UNREACHABLE and "Could not reach the portal at http://127.0.0.1:9" in done.stderr


def test_logs_follow_prints_each_new_line_once_soon_after_the_pod_writes_it(
        signed_in, training, flavor, ready_team, member, simulated, monkeypatch, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor)
    written = ["epoch 1 loss 0.90", "epoch 2 loss 0.51"]
    monkeypatch.setattr(simulated, "pod_logs", lambda **kwargs: "\n".join(written) + "\n")
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.RUNNING)
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPU_PORTAL_")}
    env.update(PYTHONPATH=str(CLI), XDG_CONFIG_HOME=str(signed_in), HOME=str(signed_in))
    follow = subprocess.Popen([sys.executable, "-m", "gpu_portal_cli", "logs", str(workload.pk), "--follow"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = Lines(follow)
        assert [printed.next() for _ in written] == written
        written.append("epoch 3 loss 0.32")
        assert printed.next() == "epoch 3 loss 0.32"
        services.workload_stop(user=member, workload=workload)
        Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.STOPPED)
        assert follow.wait(timeout=30) == OK
        assert printed.rest() == []  # nothing printed twice
    finally:
        follow.kill()


class Lines:
    """What a process prints, line by line, read as it comes (a thread reads it into a queue)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout
        def read() -> None:
            for line in stream:
                self.queue.put(line.rstrip("\n"))

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def next(self, *, deadline: float = 30) -> str:
        """The next line, waited for up to `deadline` seconds (how soon is a benchmark's figure:
        benchmarks/cli.py)."""
        try:
            return self.queue.get(timeout=deadline)
        except queue.Empty:
            raise AssertionError(f"nothing printed within {deadline:.0f} s") from None

    def rest(self) -> list[str]:
        """Every line printed after those taken, once the process has closed its output."""
        self.reader.join(timeout=30)
        return [self.queue.get() for _ in range(self.queue.qsize())]


def test_usage_and_completion(signed_in):
    usage = run(signed_in, "usage")
    assert usage.returncode == OK and "Total 0" in usage.stdout
    assert "GPU-hours" in usage.stdout
    bash = run(signed_in, "completion", "bash")
    assert bash.returncode == OK and "complete -F _gpu_portal gpu-portal" in bash.stdout and "launch" in bash.stdout
