"""Idle policies: the platform's default and bounds (IdleDefaults, set by platform admins) and
each template version's own choice within them, resolved into the one policy the sweep applies.

A version's empty field takes the default. A notebook version made before idle policies, with
only `idle_minutes`, keeps what it meant: stop after that long idle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.db import models

from jobs import kinds


# Declared here, with the policies it is part of, for jobs.models to use (it imports this module).
class IdleAction(models.TextChoices):
    NOTIFY = "notify", "Warn the owner only"
    STOP = "stop", "Stop it"
    SCALE_TO_MIN = "scale_to_min", "Scale down to its minimum replicas (inference)"


class Bounds(Protocol):
    threshold_percent: int
    window_minutes: int
    action: str
    grace_minutes: int
    min_threshold_percent: int
    max_threshold_percent: int
    min_window_minutes: int
    max_window_minutes: int
    min_grace_minutes: int
    max_grace_minutes: int
    allowed_actions: list[str]


@dataclass(frozen=True)
class IdlePolicy:
    threshold_percent: int
    window_minutes: int
    action: str
    grace_minutes: int

    def describe(self) -> str:
        action = IdleAction(self.action).label.lower()
        after = "" if self.action == IdleAction.NOTIFY else f", then {action} {self.grace_minutes} minutes later"
        return (f"idle when its GPUs are under {self.threshold_percent} % engine active for "
                f"{self.window_minutes} minutes: the owner is warned{after}")


def platform_default(bounds: Bounds) -> IdlePolicy:
    """The platform's own policy: what a version that sets none of its own is held to."""
    return IdlePolicy(bounds.threshold_percent, bounds.window_minutes, str(bounds.action), bounds.grace_minutes)


def allowed_actions(bounds: Bounds) -> list[str]:
    return [a for a in IdleAction.values if not bounds.allowed_actions or a in bounds.allowed_actions]


def effective_policy(version: Any, bounds: Bounds) -> IdlePolicy:
    """The policy a workload launched from `version` is held to."""
    legacy_notebook = version.template.kind_facts.legacy_idle_minutes and version.idle_minutes > 0
    window = version.idle_window_minutes or (version.idle_minutes if legacy_notebook else bounds.window_minutes)
    action = version.idle_action or (IdleAction.STOP if legacy_notebook else bounds.action)
    if action == IdleAction.SCALE_TO_MIN and not version.template.kind_facts.scalable:
        action = IdleAction.NOTIFY  # a platform default of scale-down means "warn" for what has no replicas
    return IdlePolicy(
        threshold_percent=version.idle_threshold_percent if version.idle_threshold_percent is not None
        else bounds.threshold_percent,
        window_minutes=window, action=str(action),
        grace_minutes=version.idle_grace_minutes if version.idle_grace_minutes is not None else bounds.grace_minutes,
    )


def version_problems(fields: dict[str, Any], *, kind: str, bounds: Bounds) -> dict[str, str]:
    """What is wrong with a template version's idle policy, by field, in words."""
    problems: dict[str, str] = {}
    for field, low, high, unit in (
        ("idle_threshold_percent", bounds.min_threshold_percent, bounds.max_threshold_percent, "%"),
        ("idle_window_minutes", bounds.min_window_minutes, bounds.max_window_minutes, "minutes"),
        ("idle_grace_minutes", bounds.min_grace_minutes, bounds.max_grace_minutes, "minutes"),
    ):
        value = fields.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            problems[field] = f"The {_words(field)} must be a whole number."
        elif not low <= value <= high:
            problems[field] = f"The {_words(field)} must be between {low} and {high} {unit} (the platform's bounds)."
    action = fields.get("idle_action") or ""
    if action:
        if action not in IdleAction.values:
            problems["idle_action"] = f"The idle action must be one of {', '.join(IdleAction.values)}."
        elif action not in allowed_actions(bounds):
            problems["idle_action"] = (f"The platform allows only these idle actions: {', '.join(allowed_actions(bounds))}.")
        elif action == IdleAction.SCALE_TO_MIN and not (kinds.known(kind) and kinds.get(kind).scalable):
            scalable = kinds.words(kinds.names(scalable=True), nouns=True)
            problems["idle_action"] = f"Only {scalable} can be scaled down when idle; choose notify or stop."
    return problems


def defaults_problems(bounds: Bounds) -> dict[str, str]:
    """What is wrong with the platform's defaults: each default must lie within its own bounds."""
    problems: dict[str, str] = {}
    for field, low, high in (("threshold_percent", "min_threshold_percent", "max_threshold_percent"),
                             ("window_minutes", "min_window_minutes", "max_window_minutes"),
                             ("grace_minutes", "min_grace_minutes", "max_grace_minutes")):
        lo, hi, value = getattr(bounds, low), getattr(bounds, high), getattr(bounds, field)
        if lo > hi:
            problems[low] = f"The lowest {_words(field)} cannot exceed the highest."
        elif not lo <= value <= hi:
            problems[field] = f"The default {_words(field)} must lie between {lo} and {hi}."
    if bounds.max_threshold_percent > 100:
        problems["max_threshold_percent"] = "A percentage is at most 100."
    unknown = [a for a in bounds.allowed_actions or [] if a not in IdleAction.values]
    if unknown:
        problems["allowed_actions"] = f"Unknown idle actions: {', '.join(map(str, unknown))}."
    elif bounds.action not in allowed_actions(bounds):
        problems["action"] = "The default idle action must be one of the allowed ones."
    return problems


def _words(field: str) -> str:
    return {"idle_threshold_percent": "idle threshold", "threshold_percent": "idle threshold",
            "idle_window_minutes": "idle window", "window_minutes": "idle window",
            "idle_grace_minutes": "grace period", "grace_minutes": "grace period"}.get(field, field)
