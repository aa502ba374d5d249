"""benchmarks/RESULTS.md: every benchmark's latest figures, written by the benchmarks themselves.

Each script ends with `record("<its name>", figures)`: its section of RESULTS.md is replaced by
this run's figures, with the date, the commit, the command, the machine (cores, memory, CPU model)
and the load average when the script started and when it recorded, so a figure is never read
without what it was measured on. Sections are keyed by benchmark and kept in name order; nothing in
the file is written by hand.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HEADER = """# Benchmark results

Written by the benchmark scripts (`benchmarks/results.py`): each run of a script replaces its own
section with its figures, the date, the commit, the command, the machine and its load. Do not edit
by hand; run the benchmark again. What each benchmark measures and how to run it:
[README.md](README.md).
"""
_BEGIN = re.compile(r"^<!-- benchmark: (?P<name>[a-z0-9_-]+) -->$", re.MULTILINE)

# The load when the script began: imported at its start, read again when it records.
_LOAD_AT_START = os.getloadavg()


@dataclass(frozen=True)
class Provenance:
    recorded: str  # when, in words: "2026-11-27 19:40 UTC"
    commit: str
    command: str
    machine: str
    load: str


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def machine() -> str:
    """Cores, memory and CPU model of this machine, from /proc where it has one."""
    model, memory = "unknown CPU", ""
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else model
        kib = re.search(r"^MemTotal:\s*(\d+) kB$", Path("/proc/meminfo").read_text(), re.MULTILINE)
        memory = f", {int(kib.group(1)) / 2**20:.1f} GiB" if kib else ""
    except OSError:
        pass
    return f"{os.cpu_count()} cores{memory}, {model}"


def provenance() -> Provenance:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    now = os.getloadavg()
    return Provenance(
        recorded=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        commit=commit,
        command=shlex.join(["python", str(Path(sys.argv[0]).resolve().relative_to(ROOT))
                            if Path(sys.argv[0]).resolve().is_relative_to(ROOT) else sys.argv[0], *sys.argv[1:]]),
        machine=machine(),
        load=(f"{_LOAD_AT_START[0]:.2f} / {_LOAD_AT_START[1]:.2f} / {_LOAD_AT_START[2]:.2f} at the start, "
              f"{now[0]:.2f} / {now[1]:.2f} / {now[2]:.2f} at the end (1, 5 and 15 minutes)"),
    )


def _flat(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Nested figures as (dotted name, shown value) rows; a list of plain values stays one row."""
    if isinstance(value, Mapping):
        for name, inner in value.items():
            yield from _flat(inner, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list | tuple) and any(isinstance(item, Mapping | list | tuple) for item in value):
        for index, inner in enumerate(value):
            yield from _flat(inner, f"{key}[{index}]")
    elif isinstance(value, list | tuple):
        yield key, ", ".join(_shown(item) for item in value)
    else:
        yield key, _shown(value)


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value)
    return str(value)


def _cell(shown: str) -> str:
    return shown.replace("|", "\\|").replace("\n", " ")


def section(name: str, figures: Mapping[str, Any], origin: Provenance) -> str:
    rows = "\n".join(f"| `{key}` | {_cell(shown)} |" for key, shown in _flat(figures))
    return (f"<!-- benchmark: {name} -->\n## {name}\n\n"
            f"- recorded: {origin.recorded}\n- commit: {origin.commit}\n- command: `{origin.command}`\n"
            f"- machine: {origin.machine}\n- load average: {origin.load}\n\n"
            f"| figure | value |\n|---|---|\n{rows}\n")


def sections(text: str) -> dict[str, str]:
    """The file's sections by benchmark name, each as written."""
    found = list(_BEGIN.finditer(text))
    return {match["name"]: text[match.start():(found[i + 1].start() if i + 1 < len(found) else len(text))].rstrip() + "\n"
            for i, match in enumerate(found)}


def record(name: str, figures: Mapping[str, Any], *, path: Path = RESULTS, origin: Provenance | None = None) -> None:
    """Replace benchmark `name`'s section of RESULTS.md with these figures (the newest run wins)."""
    if not re.fullmatch(r"[a-z0-9_-]+", name):
        raise ValueError(f"a benchmark's name is lowercase letters, digits, '_' and '-': {name!r}")
    kept = sections(path.read_text()) if path.exists() else {}
    kept[name] = section(name, figures, origin or provenance())
    path.write_text(HEADER + "".join(f"\n{kept[key]}" for key in sorted(kept)))
    print(f"recorded in {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {name}", file=sys.stderr)


QUEUE_BACKENDS = ("kueue", "volcano")


def per_queue_backend(script: str, argv: list[str]) -> dict[str, Any]:
    """Runs `script` once per queue backend, each in a process of its own (Django is set up once
    per process, and each starts a control plane of its own) with `--queue-backend`, reads the
    figures each prints as its last line, and gives them side by side (`kueue.…`, `volcano.…`)."""
    import json

    figures: dict[str, Any] = {}
    for backend in QUEUE_BACKENDS:
        child = subprocess.run([sys.executable, script, *argv, "--queue-backend", backend],
                               check=True, stdout=subprocess.PIPE, text=True)
        found = json.loads(child.stdout.strip().splitlines()[-1])
        figures.update({f"{backend}.{key}": value for key, value in found.items()})
    print(json.dumps(figures, indent=2))
    return figures
