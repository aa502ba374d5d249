"""How an app to the right plugs into an app to its left (portal ← tenants ← jobs ← billing).

An app never imports one to its right, so where a left app needs an answer only a right one has
(billing's budget on a launch, jobs' workloads on a team's deletion), the left app declares a
`Hook` beside the code that asks it, and the right app fills it in its `AppConfig.ready()`. Where
several right apps want to hear of something (a team saved, run intervals closed), the left app
declares an `Event` and they subscribe.

Both are typed by the callable they hold, and both are listed in one registry: a required hook
that no app filled, or a required event nobody listens to, stops every process at start
(`portal.hooks.apps.HooksConfig`, the last installed app, checks once all others are ready), so
a missing app can never silently turn a guarantee off (a hard-stopped budget that no longer
refuses launches, say). A hook is filled once; filling it twice is an error too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_declared: list[Hook[Any] | Event[Any]] = []


class HookMissing(RuntimeError):
    """A required hook or event nobody filled: the process must not run like that."""


class Hook(Generic[F]):
    """One answer a left app needs from a right one: `fill` it once, call it through `call`."""

    def __init__(self, name: str, *, by: str, required: bool = True) -> None:
        self.name, self.by, self.required = name, by, required
        self._fn: F | None = None
        _declared.append(self)

    def fill(self, fn: F) -> None:
        if self._fn is not None and self._fn is not fn:
            raise HookMissing(f"The hook {self.name} is filled twice; one app answers it ({self.by}).")
        self._fn = fn

    @property
    def filled(self) -> bool:
        return self._fn is not None

    @property
    def call(self) -> F:
        """The callable that fills it. An unfilled hook raises rather than answer nothing."""
        if self._fn is None:
            raise HookMissing(f"The hook {self.name} is not filled: {self.by} must fill it in its AppConfig.ready().")
        return self._fn

    def __repr__(self) -> str:
        return f"Hook({self.name!r}, filled by {self.by})"


class Event(Generic[F]):
    """Something a left app tells whoever subscribed: each subscriber is called in turn."""

    def __init__(self, name: str, *, by: str, required: bool = True) -> None:
        self.name, self.by, self.required = name, by, required
        self._subscribers: list[F] = []
        _declared.append(self)

    def subscribe(self, fn: F) -> None:
        if fn not in self._subscribers:
            self._subscribers.append(fn)

    @property
    def filled(self) -> bool:
        return bool(self._subscribers)

    def send(self, *args: Any, **kwargs: Any) -> None:
        for fn in list(self._subscribers):
            fn(*args, **kwargs)

    def collect(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Each subscriber's answer, in the order they subscribed."""
        return [fn(*args, **kwargs) for fn in list(self._subscribers)]

    def __repr__(self) -> str:
        return f"Event({self.name!r}, heard by {self.by})"


def declared() -> list[Hook[Any] | Event[Any]]:
    return list(_declared)


def missing() -> list[str]:
    """Sentences naming each required hook or event nobody filled."""
    return [f"{hook.name} (filled by {hook.by})" for hook in _declared if hook.required and not hook.filled]


def verify() -> None:
    """Raises HookMissing naming every required hook left unfilled."""
    gaps = missing()
    if gaps:
        raise HookMissing("Required hooks are not filled, so the portal would run without what they guard: "
                          + "; ".join(gaps) + ". Install the apps that fill them.")
