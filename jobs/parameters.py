"""The few settings a template lets users choose: declared with a type and bounds, checked, and
only then put into arguments and environment. Pure: no Django."""

from __future__ import annotations

import math
import re
import string
from typing import Any

TYPES = ("int", "float", "choice", "bool")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# ASCII digits with an optional sign: int() would also read "١٢" (Arabic-Indic digits) as 12, and
# a number beyond 2^53 is rounded by JSON readers.
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,16}")
DECIMAL_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")
# Bounds and defaults are stored as JSON and compared as numbers: beyond 2^53 a JSON reader may
# round them, and far beyond it a database's JSON column refuses them.
LARGEST = 2**53
# The parameter that counts a distributed job's pods or an inference server's replicas.
POD_COUNT_NAMES = ("workers", "replicas")


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
        for key in ("min", "max", "default"):
            value = spec.get(key)
            if key != "default" and value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ParameterError(f"Parameter {name}: its {key} must be a number, not “{value}”.", name=name)
            if isinstance(value, int | float) and not isinstance(value, bool) and not -LARGEST <= value <= LARGEST:
                raise ParameterError(f"Parameter {name}: its {key} must be between -2^53 and 2^53.", name=name)
        validate_parameters(declared=[spec], given={})  # the default must satisfy its own bounds


def check_pod_count(declared: list[dict[str, Any]]) -> None:
    """For a template whose workers or replicas parameter counts pods: a whole number, at least
    1, with a maximum, or every launch from it would be refused or break."""
    for spec in declared:
        name = spec.get("name")
        if name not in POD_COUNT_NAMES:
            continue
        if spec.get("type") != "int":
            raise ParameterError(f"{name} must be a whole number (type int): it counts pods.", name=name)
        low, high = spec.get("min"), spec.get("max")
        if low is None or high is None:
            raise ParameterError(f"{name} needs a minimum of at least 1 and a maximum: it counts pods.", name=name)
        if low < 1:
            raise ParameterError(f"{name} must be at least 1: it counts pods.", name=name)


def _coerce(spec: dict[str, Any], raw: Any) -> Any:
    name, kind = spec["name"], spec["type"]
    value: int | float | bool
    if kind == "int":
        text = str(raw).strip()
        if isinstance(raw, bool) or not WHOLE_NUMBER.fullmatch(text):
            raise ParameterError(f"{name} must be a whole number, not “{raw}”.", name=name)
        value = int(text)
    elif kind == "float":
        text = str(raw).strip()
        # ASCII only, as for int: float() also reads "１", "1_0" and "٣" (issue 13's escalation corpus).
        if isinstance(raw, bool) or not DECIMAL_NUMBER.fullmatch(text):
            raise ParameterError(f"{name} must be a number, not “{raw}”.", name=name)
        value = float(text)
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
    if any(isinstance(bound, bool) or not isinstance(bound, int | float | None) for bound in (low, high)):
        raise ParameterError(f"Parameter {name} has a bound that is not a number; ask the template's owner to fix it.", name=name)
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
