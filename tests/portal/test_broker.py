"""The embedded broker (portal/broker.py) under several producer and consumer processes."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from kombu.connection import Connection

from portal.broker import Transport

# kombu keeps the exchange bindings a process has made in memory, shared by every connection
# of the transport; each test gets its own queue name so a binding made against another test's
# folder is never taken for one in this test's folder.
QUEUE = "portal-test"


def _options(root: Path) -> dict[str, str | float]:
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "claimed_folder": str(root / "claimed"),
        "quarantine_folder": str(root / "quarantine"),
        "control_folder": str(root / "control"),
        # Consumers poll as fast as they can, so they meet producers mid-write if that can happen.
        "polling_interval": 0.001,
    }


def _queue_name(root: Path) -> str:
    return f"{QUEUE}-{root.name}"


def _connection(root: Path) -> Connection:
    return Connection("filesystem://", transport=Transport, transport_options=_options(root))


def _produce(root: str, producer: int, count: int) -> None:
    with _connection(Path(root)) as conn:
        queue = conn.SimpleQueue(_queue_name(Path(root)))
        for seq in range(count):
            queue.put({"producer": producer, "seq": seq, "padding": "x" * 2000})
        queue.close()


def _consume(root: str, expected: int, delivered: Any, results: Any, deadline: float) -> None:
    seen: list[tuple[int, int]] = []
    with _connection(Path(root)) as conn:
        queue = conn.SimpleQueue(_queue_name(Path(root)))
        while time.monotonic() < deadline:
            try:
                message = queue.get(block=True, timeout=0.5)
            except queue.Empty:
                if delivered.value >= expected:
                    break
                continue
            body = message.payload
            assert body["padding"] == "x" * 2000
            seen.append((body["producer"], body["seq"]))
            message.ack()
            with delivered.get_lock():
                delivered.value += 1
        queue.close()
    for item in seen:
        results.put(item)
    results.put(None)


def test_concurrent_producers_and_consumers_deliver_every_message_exactly_once(tmp_path: Path) -> None:
    producers, per_producer, consumers = 4, 750, 2
    expected = producers * per_producer
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    delivered = ctx.Value("i", 0)
    deadline = time.monotonic() + 120
    consumer_procs = [ctx.Process(target=_consume, args=(str(tmp_path), expected, delivered, results, deadline))
                      for _ in range(consumers)]
    producer_procs = [ctx.Process(target=_produce, args=(str(tmp_path), p, per_producer)) for p in range(producers)]
    for proc in consumer_procs + producer_procs:
        proc.start()
    for proc in producer_procs:
        proc.join(60)
        assert proc.exitcode == 0

    received: list[tuple[int, int]] = []
    finished = 0
    while finished < consumers:
        item = results.get(timeout=150)
        if item is None:
            finished += 1
        else:
            received.append(item)
    for proc in consumer_procs:
        proc.join(10)
        assert proc.exitcode == 0, "a consumer died"

    assert len(received) == expected
    assert set(received) == {(p, s) for p in range(producers) for s in range(per_producer)}
    assert os.listdir(tmp_path / "quarantine") == []
    assert [name for name in os.listdir(tmp_path / "queue") if not name.startswith(".")] == []


def test_a_truncated_message_file_is_quarantined_and_does_not_stop_the_consumer(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue(_queue_name(tmp_path))
        queue.put({"n": 1})
        (tmp_path / "queue" / f"{0:020d}_{'0' * 32}.{_queue_name(tmp_path)}.msg").write_text('{"body": "eyJ')
        queue.put({"n": 2})

        got = [queue.get(timeout=2) for _ in range(2)]
        for message in got:
            message.ack()
        queue.close()

    assert [message.payload["n"] for message in got] == [1, 2]
    assert os.listdir(tmp_path / "quarantine") == [f"{0:020d}_{'0' * 32}.{_queue_name(tmp_path)}.msg"]


def test_a_message_still_being_written_is_not_read(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue(_queue_name(tmp_path))
        (tmp_path / "queue" / ".incoming-half").write_text('{"body": "eyJ')
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.5)
        queue.close()

    assert (tmp_path / "queue" / ".incoming-half").exists()


def _take_without_acking(root: str) -> None:
    with _connection(Path(root)) as conn:
        queue = conn.SimpleQueue(_queue_name(Path(root)))
        queue.get(timeout=2)
        os._exit(1)  # dies the way a killed worker does: no acknowledgement, no cleanup


def test_a_message_taken_by_a_consumer_that_died_goes_back_to_the_queue(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        conn.SimpleQueue(_queue_name(tmp_path)).put({"n": 7})
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_take_without_acking, args=(str(tmp_path),))
    proc.start()
    proc.join(10)
    assert proc.exitcode == 1

    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue(_queue_name(tmp_path))
        message = queue.get(timeout=2)
        message.ack()
        queue.close()

    assert message.payload == {"n": 7}
    assert list((tmp_path / "claimed").rglob("*.msg")) == []


def test_an_acknowledged_message_leaves_no_file_behind(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue(_queue_name(tmp_path))
        queue.put({"n": 1})
        message = queue.get(timeout=2)
        assert len(list((tmp_path / "claimed").rglob("*.msg"))) == 1
        message.ack()
        queue.close()

    assert list((tmp_path / "claimed").rglob("*.msg")) == []
    assert [name for name in os.listdir(tmp_path / "queue") if not name.startswith(".")] == []


def test_a_message_has_no_readable_name_until_it_is_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names_seen_mid_write: list[list[str]] = []
    real_fsync = os.fsync

    def fsync_and_look(fd: int) -> None:
        real_fsync(fd)
        names_seen_mid_write.append([n for n in os.listdir(tmp_path / "queue") if not n.startswith(".")])

    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue(_queue_name(tmp_path))
        monkeypatch.setattr("portal.broker.os.fsync", fsync_and_look)
        queue.put({"n": 1})
        monkeypatch.undo()
        message = queue.get(timeout=2)
        message.ack()
        queue.close()

    assert names_seen_mid_write == [[]]
    assert message.payload == {"n": 1}
