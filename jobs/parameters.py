"""The few settings a template lets users choose: declared with a type and bounds, checked, and
only then put into arguments and environment. Pure: no Django."""

from __future__ import annotations

import math
import re
import string
from typing import Any

TYPES = ("int", "float", "choice", "bool")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class ParameterError(ValueError):
    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


def check_declarations(declared: list[dict[str, Any]]) -> None:
    """A template's parameter list must itself make sense before anyone launches from it."""
    seen = set()
    for spec in declared:
        name = spec.get("name", "")
        if not NAME.match(str(name)):
            raise ParameterError(f"Parameter name “{name}” must be lowercase letters, digits and underscores.")
        if name in seen:
            raise ParameterError(f"Parameter {name} is declared twice.")
        seen.add(name)
        if spec.get("type") not in TYPES:
            raise ParameterError(f"Parameter {name} has type “{spec.get('type')}”; use one of {', '.join(TYPES)}.")
        if spec["type"] == "choice" and not spec.get("choices"):
            raise ParameterError(f"Parameter {name} is a choice but lists no choices.")
        validate_parameters(declared=[spec], given={})  # the default must satisfy its own bounds


def _coerce(spec: dict[str, Any], raw: Any) -> Any:
    name, kind = spec["name"], spec["type"]
    value: int | float | bool
    if kind == "int":
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ParameterError(f"{name} must be a whole number, not “{raw}”.", name=name) from None
    elif kind == "float":
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ParameterError(f"{name} must be a number, not “{raw}”.", name=name) from None
        if not math.isfinite(value):
            raise ParameterError(f"{name} must be a finite number.", name=name)
    elif kind == "bool":
        if isinstance(raw, bool):
            value = raw
        elif str(raw).lower() in {"true", "1", "yes", "on"}:
            value = True
        elif str(raw).lower() in {"false", "0", "no", "off", ""}:
            value = False
        else:
            raise ParameterError(f"{name} must be true or false, not “{raw}”.", name=name)
    else:
        choice = str(raw)
        if choice not in [str(c) for c in spec["choices"]]:
            raise ParameterError(f"{name} must be one of {', '.join(map(str, spec['choices']))}, not “{raw}”.", name=name)
        return choice
    low, high = spec.get("min"), spec.get("max")
    if kind in ("int", "float") and ((low is not None and value < low) or (high is not None and value > high)):
        raise ParameterError(f"{name} must be between {low} and {high}; {value} is outside.", name=name)
    return value


def validate_parameters(*, declared: list[dict[str, Any]], given: dict[str, Any]) -> dict[str, Any]:
    """The full set of values: the given ones checked, the rest from defaults. Unknown names are refused."""
    known = {spec["name"]: spec for spec in declared}
    unknown = sorted(set(given) - set(known))
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ParameterError(f"This template has no parameter {', '.join(unknown)} (it takes: {allowed}).", name=unknown[0])
    values = {}
    for name, spec in known.items():
        raw = given.get(name, spec.get("default"))
        if raw is None or raw == "":
            if spec["type"] == "bool":
                raw = False
            else:
                raise ParameterError(f"{name} needs a value.", name=name)
        values[name] = _coerce(spec, raw)
    return values


class _Strict(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        raise ParameterError(f"The template refers to {{{key}}}, which is not one of its parameters.")


def render(text: str, values: dict[str, Any]) -> str:
    """Fills {name} placeholders. Values are whole arguments or variables, never shell text."""
    fields = [field for _, field, _, _ in string.Formatter().parse(text) if field]
    if any(not NAME.match(field) for field in fields):
        raise ParameterError(f"“{text}” has a placeholder that is not a plain parameter name.")
    return text.format_map(_Strict({k: str(v).lower() if isinstance(v, bool) else v for k, v in values.items()}))
