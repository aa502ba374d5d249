"""The embedded Celery broker: kombu's file-system transport, made safe for several processes.

kombu's own transport writes a message into its final name, so a worker polling the folder can
read it half written and die of a JSONDecodeError (kombu#1551); it claims a message by moving it
to the temp folder, which copies across file systems and lets two consumers take the same one;
and it forgets a message the moment it is read, so a worker that crashes before acknowledging
loses it. Here:

- a producer writes to a dot-name no reader looks at, fsyncs it and renames it into place, so a
  reader sees a whole message or none;
- a consumer claims a message by renaming it into its own claim folder on the same file system,
  which exactly one consumer can win, and deletes it only on acknowledgement; the claims of a
  process that died go back to the queue when the next channel opens;
- a file that still cannot be read is moved to a quarantine folder with a log line, and the
  worker carries on.

Used only by the embedded setup (`make demo`, the fast tests); production runs on Redis.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

MESSAGE_SUFFIX = ".msg"
# Names a reader skips: kombu's reader and ours match only "<stamp>_<uuid>.<queue>.msg".
TEMP_PREFIX = ".incoming-"


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that any reader sees either nothing or all of it."""
    temp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        with open(temp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Channel(filesystem.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # delivery tag -> the claimed file that keeps the message until it is acknowledged
        self._claims: dict[str, Path] = {}
        for folder in (self.queue_folder, self.claim_root, self.quarantine_folder, self.control_folder):
            folder.mkdir(parents=True, exist_ok=True)
        self._recover_claims_of_dead_processes()

    # --- folders ------------------------------------------------------------------------------

    @property
    def queue_folder(self) -> Path:
        return Path(self.data_folder_in)

    @property
    def claim_root(self) -> Path:
        return Path(self.transport_options.get("claimed_folder") or self.queue_folder.parent / "claimed")

    @property
    def claim_folder(self) -> Path:
        # One folder per process, so a survivor can tell a dead consumer's claims from a live one's.
        folder = self.claim_root / str(os.getpid())
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def quarantine_folder(self) -> Path:
        return Path(self.transport_options.get("quarantine_folder") or self.queue_folder.parent / "quarantine")

    # --- producing ----------------------------------------------------------------------------

    # kombu's base and file-system channels name the second parameter differently; ours follows its parent.
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        # A fixed-width nanosecond stamp sorts as text in the order it was written.
        name = f"{time.time_ns():020d}_{uuid.uuid4().hex}.{queue}{MESSAGE_SUFFIX}"
        try:
            write_atomically(Path(self.data_folder_out) / name, str_to_bytes(dumps(payload)))
        except OSError as error:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out}") from error

    # --- consuming ----------------------------------------------------------------------------

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        wanted = f"{queue}{MESSAGE_SUFFIX}"
        for name in sorted(os.listdir(self.queue_folder)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            claimed = self.claim_folder / name
            try:
                os.rename(self.queue_folder / name, claimed)
            except FileNotFoundError:
                continue  # another consumer took it first
            try:
                payload = loads(bytes_to_str(claimed.read_bytes()))
                delivery_tag = payload["properties"]["delivery_tag"]
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
                self._quarantine(claimed, error)
                continue
            self._claims[delivery_tag] = claimed
            return payload
        raise Empty()

    def _quarantine(self, path: Path, error: Exception) -> None:
        target = self.quarantine_folder / path.name
        try:
            os.replace(path, target)
        except OSError:
            log.exception("Broker: could not quarantine the unreadable message %s", path)
            return
        log.error("Broker: message %s could not be read (%s); moved to %s", path.name, error, target)

    def _forget_claim(self, delivery_tag: str) -> None:
        claimed = self._claims.pop(delivery_tag, None)
        if claimed is not None:
            with contextlib.suppress(FileNotFoundError):
                claimed.unlink()

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple=multiple)
        self._forget_claim(delivery_tag)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        # With requeue the base class writes the message back first, so it is never only in memory.
        super().basic_reject(delivery_tag, requeue=requeue)
        self._forget_claim(delivery_tag)

    def _restore(self, message: Any) -> None:
        super()._restore(message)
        self._forget_claim(message.delivery_tag)

    def _recover_claims_of_dead_processes(self) -> None:
        for folder in self.claim_root.iterdir():
            if not folder.is_dir() or not folder.name.isdigit() or _process_alive(int(folder.name)):
                continue
            returned = 0
            for claimed in folder.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    os.rename(claimed, self.queue_folder / claimed.name)
                    returned += 1
            with contextlib.suppress(OSError):
                folder.rmdir()
            if returned:
                log.warning("Broker: %d unacknowledged message(s) of dead process %s put back on the queue",
                            returned, folder.name)

    def _purge(self, queue: str) -> int:
        count = 0
        wanted = f"{queue}{MESSAGE_SUFFIX}"
        for name in os.listdir(self.queue_folder):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.queue_folder / name)
                count += 1
        return count

    def _size(self, queue: str) -> int:
        wanted = f"{queue}{MESSAGE_SUFFIX}"
        return sum(1 for name in os.listdir(self.queue_folder)
                   if not name.startswith(".") and name.partition(".")[2] == wanted)

    # --- exchange tables (fanout: the workers' remote control) ----------------------------------

    @contextlib.contextmanager
    def _table_lock(self, exchange: str) -> Iterator[Path]:
        # kombu truncates a table before it locks it, so a reader could load an empty file; here a
        # side lock file serialises writers and a rename publishes the table whole.
        file = self._exchange_file(exchange)
        with open(file.with_name(f".{file.name}.lock"), "ab") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield file
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def get_table(self, exchange: str) -> list[filesystem.exchange_queue_t]:
        file = self._exchange_file(exchange)
        try:
            rows = json.loads(file.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as error:
            raise ChannelError(f"Cannot read exchange table {file}") from error
        return [filesystem.exchange_queue_t(*row) for row in rows]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            rows = self.get_table(exchange)
            if row not in rows:
                write_atomically(file, str_to_bytes(dumps([row, *rows])))

    def _delete(self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any) -> None:
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            rows = self.get_table(exchange)
            if row in rows:
                write_atomically(file, str_to_bytes(dumps([r for r in rows if r != row])))


class Transport(filesystem.Transport):
    Channel = Channel
