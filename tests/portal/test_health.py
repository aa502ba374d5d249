"""Liveness (/healthz) and readiness (/readyz): a dead worker, beat, watcher or broker says so."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.signals import before_task_publish
from django.utils import timezone

from jobs.management.commands.watch_workloads import LoopHeartbeat
from portal.celery import HEARTBEAT_TASK, app
from portal.health import BEAT, WATCHER, WORKER, heartbeat_record
from portal.management.commands.run_demo_processes import Child
from portal.models import Heartbeat
from portal.tasks import heartbeat

BROKER_KEYS = ("broker_url", "broker_transport", "broker_transport_options")


@pytest.fixture
def broker_conf() -> Iterator[Any]:
    """Celery's broker settings, put back as they were after the test."""
    saved = {key: app.conf[key] for key in BROKER_KEYS}
    yield app.conf
    app.conf.update(saved)


@pytest.fixture
def embedded_broker(tmp_path: Path, broker_conf: Any) -> Path:
    """The embedded broker in a folder of the test's own, not the developer's var/."""
    broker_conf.update(broker_url="filesystem://", broker_transport="portal.broker:Transport", broker_transport_options={
        "data_folder_in": str(tmp_path / "queue"), "data_folder_out": str(tmp_path / "queue"),
        "claimed_folder": str(tmp_path / "claimed"), "quarantine_folder": str(tmp_path / "quarantine"),
        "control_folder": str(tmp_path / "control"),
    })
    return tmp_path


@pytest.fixture
def all_alive(db: None, embedded_broker: Path) -> None:
    for name in (WORKER, BEAT, WATCHER):
        heartbeat_record(name=name)


def _age(name: str, seconds: int) -> None:
    Heartbeat.objects.filter(name=name).update(at=timezone.now() - dt.timedelta(seconds=seconds))


def test_liveness_answers_ok_and_names_nothing_inside_the_site(client, db):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readiness_is_ok_when_every_process_has_a_fresh_heartbeat(client, all_alive):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "problems": []}


def test_a_stale_worker_heartbeat_makes_readiness_503_with_the_reason(client, all_alive):
    _age(WORKER, 300)

    response = client.get("/readyz")

    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("worker: last heartbeat 300 s ago (bound 60 s)")
    assert "worker has not run its heartbeat task" in problem


def test_a_stale_beat_heartbeat_makes_readiness_503_with_the_reason(client, all_alive):
    _age(BEAT, 120)

    response = client.get("/readyz")

    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("beat: last heartbeat 120 s ago")
    assert "Celery beat has not sent" in problem


def test_a_stale_watcher_heartbeat_makes_readiness_503_with_the_reason(client, all_alive):
    _age(WATCHER, 90)

    response = client.get("/readyz")

    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("watcher: last heartbeat 90 s ago")
    assert "watch_workloads" in problem


def test_a_process_that_never_beat_is_reported_by_name(client, all_alive):
    Heartbeat.objects.filter(name=WATCHER).delete()

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["problems"][0].startswith("watcher: no heartbeat yet")


def test_an_unreachable_broker_makes_readiness_503_without_naming_its_address(client, all_alive, broker_conf, settings):
    settings.PORTAL_READINESS_BROKER_TIMEOUT = 0.5
    broker_conf.update(broker_url="redis://127.0.0.1:1/0", broker_transport=None, broker_transport_options={})

    response = client.get("/readyz")

    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("broker: did not accept a connection")
    assert "127.0.0.1" not in problem


def test_readiness_checks_only_what_the_site_runs(client, all_alive, settings):
    settings.PORTAL_READINESS_CHECKS = ["database", "broker", "worker", "beat"]
    _age(WATCHER, 3600)

    assert client.get("/readyz").status_code == 200


def test_a_heartbeat_after_the_first_is_one_update_of_the_same_row(db, django_assert_num_queries):
    first = timezone.now() - dt.timedelta(seconds=10)
    heartbeat_record(name=WATCHER, at=first)
    with django_assert_num_queries(1):
        heartbeat_record(name=WATCHER)
    (row,) = Heartbeat.objects.filter(name=WATCHER)
    assert row.at > first


def test_the_heartbeat_task_records_the_workers_heartbeat(db):
    heartbeat.delay()

    assert Heartbeat.objects.filter(name=WORKER).exists()


def test_publishing_the_heartbeat_task_records_beats_heartbeat_and_other_tasks_do_not(db):
    before_task_publish.send(sender="jobs.tasks.workloads_sync", body=(), headers={})
    assert not Heartbeat.objects.filter(name=BEAT).exists()

    before_task_publish.send(sender=HEARTBEAT_TASK, body=(), headers={})
    assert Heartbeat.objects.filter(name=BEAT).exists()


def test_the_watch_loop_records_a_heartbeat_at_most_every_ten_seconds_and_never_stops_the_loop(db):
    beat = LoopHeartbeat()

    assert beat() is False
    first = Heartbeat.objects.get(name=WATCHER).at
    assert beat() is False
    assert Heartbeat.objects.get(name=WATCHER).at == first


def test_a_demo_process_that_exits_is_restarted_after_backoff_and_the_restart_is_logged(tmp_path, caplog):
    child = Child("flaky", [sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path / "flaky.log")
    child.start()
    child.process.wait(10)  # type: ignore[union-attr]

    child.reap_if_exited(time.monotonic())

    assert child.process is None
    assert child.restarts == 1
    assert child.backoff == 2  # it died at once: back off before the next try
    assert "flaky (pid" in caplog.text and "exited with code 3" in caplog.text
    assert "[supervisor] flaky" in (tmp_path / "flaky.log").read_text()
    child.start()
    assert child.process is not None
    child.process.wait(10)
