"""The queue backend the site runs (PORTAL_QUEUE_BACKEND): the one door to quota and queueing in
the cluster. Every team queue, flavor and tier object, a workload's queue labels, its admission
and place in line, and each team's borrowed and lent use are asked of `backend()`; what a backend
must answer is `tenants.queueing.base.QueueBackend`. Kueue (kueue.py) and Volcano (volcano.py) are
the two; another is a module beside them and its line in BACKENDS."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from tenants.queueing.base import QueueBackend
from tenants.queueing.kueue import KueueBackend
from tenants.queueing.volcano import VolcanoBackend

BACKENDS: dict[str, Callable[[], QueueBackend]] = {"kueue": KueueBackend, "volcano": VolcanoBackend}


def chosen(value: str) -> QueueBackend:
    """The backend a PORTAL_QUEUE_BACKEND value names; an unknown one is a configuration error in words."""
    make = BACKENDS.get(value)
    if make is None:
        raise ImproperlyConfigured(f"PORTAL_QUEUE_BACKEND is “{value}”, which is not a queue backend the portal has; "
                                   f"set it to one of: {', '.join(BACKENDS)}.")
    return make()


@cache
def _backend(value: str) -> QueueBackend:
    return chosen(value)


def backend() -> QueueBackend:
    """The site's queue backend (one per setting value, made once)."""
    return _backend(settings.PORTAL_QUEUE_BACKEND)
