"""Pausing Python's cyclic garbage collector around work that builds a great many objects,
none of them in a reference cycle.

The periodic team pass lists every object the portal owns (ten per team: 10,000 at 1,000
teams) and decodes them into millions of dicts and lists. Each burst of allocations sets the
collector off, and its full runs walk the whole heap, the lists being decoded included: measured
at 1,000 teams on the real control plane, that was more than half of the pass's CPU (1.1 to 1.8 s
with the collector, 0.5 to 0.8 s without; benchmarks/scale_envelope.py, not re-run since: at 100
teams, benchmarks/onboarding.py's no-change pass is the same with and without within its noise).
Reference counting frees all of it when the pass ends; only cycles wait, for the collector's next
run. The finance overview and the rollups refresh are paused too, for the figures beside them.

The collector is one per process, shared by its threads: it runs again when the last pause
ends, and stays off if something else had turned it off before the first began.

The web process also takes what it loaded to start out of the collector's reach
(`startup_objects_frozen`): those objects live as long as the process, and every full
collection walked them again while every thread of the process waited. benchmarks/workloads.py
shows it (collector_pauses.gen2, the steady phase's full collections): the longest 43 to 84 ms
frozen, 230 to 280 ms not (2026-11-27, on 2 shared cores, four and two runs).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """A context manager, and a decorator: the cyclic collector does not run inside it."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def startup_objects_frozen() -> None:
    """Moves every object alive now out of the collector's reach, for good: called once the web
    process has loaded (portal/wsgi.py). The modules, models, URL patterns, settings and
    middleware it loaded to start (114,000 objects) live as long as the process, and each full
    collection walked all of them again, stopping every request in the process meanwhile (the
    figures are in the module's docstring). Nothing alive at start is freed later anyway; what
    requests build stays collected as before."""
    gc.freeze()
