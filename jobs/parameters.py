"""The few settings a template lets users choose: declared with a type and bounds, checked, and
only then put into arguments and environment. Pure: no Django."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jobs import policy
from jobs.manifests import GitSource, VolumeMount

# Scalars fill {name} placeholders in the template's arguments and environment. The others are
# a data scientist's own work, each still bounded and never a pod spec: "image" (the container
# image, from the template's `prefixes` and the admin's allow-list), "args" (a list of arguments
# added after the template's, at most `max_items` of at most `max_length` characters), "env"
# (variables whose names the template declares in `names`), "volume" (one of the team's
# PersistentVolumeClaims, by name, mounted at the template's `mount_path`, read-only unless the
# template says `read_only: false`; empty mounts nothing) and "git" (a repository URL and revision,
# fetched by an init container into an emptyDir the main container sees at `mount_path`; the URL
# only from the template's `prefixes` and the site's PORTAL_GIT_SOURCES; empty fetches nothing) and
# "credential" (one of the team's credentials of the template's `credential_kind`, by name: an S3
# key as the AWS_* variables, a git deploy key as files at `mount_path`, a registry login as the
# pod's image pull secret; empty mounts nothing).
SCALAR_TYPES = ("int", "float", "choice", "bool")
WORK_TYPES = ("image", "args", "env", "volume", "git", "credential")
CREDENTIAL_KINDS = ("s3", "git-ssh", "registry")  # jobs.models.TeamCredential.Kind, which needs Django
CREDENTIAL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
SOURCE_TYPES = ("volume", "git")
TYPES = (*SCALAR_TYPES, *WORK_TYPES)
ARGS_MAX_ITEMS, ARG_MAX_LENGTH, ENV_VALUE_MAX_LENGTH = 50, 1024, 4096
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
        if spec["type"] in WORK_TYPES:
            _check_work_declaration(spec)
        validate_parameters(declared=[spec], given={})  # the default must satisfy its own bounds
    if sum(1 for spec in declared if spec.get("type") == "image") > 1:
        raise ParameterError("A template may let people choose one image, not several.")
    paths = [spec["mount_path"] for spec in declared if spec.get("type") in SOURCE_TYPES
             or (spec.get("type") == "credential" and spec.get("credential_kind") == "git-ssh")]
    for path in paths:
        if paths.count(path) > 1:
            raise ParameterError(f"Two parameters mount at {path}; each volume, repository and key needs its own path.")
        if any(other != path and other.startswith(f"{path}/") for other in paths):
            raise ParameterError(f"A mount path lies inside {path}; give each volume, repository and key a path of its own.")


def _check_work_declaration(spec: dict[str, Any]) -> None:
    name, kind = spec["name"], spec["type"]
    if kind == "image":
        prefixes = spec.get("prefixes") or []
        if not isinstance(prefixes, list) or not all(isinstance(p, str) and policy.registry_entry(p) for p in prefixes):
            raise ParameterError(f"Parameter {name}: prefixes are registries, optionally with a path, "
                                 "e.g. [\"ghcr.io/acme\"].", name=name)
        if not spec.get("default"):
            raise ParameterError(f"Parameter {name} needs a default image.", name=name)
    elif kind == "args":
        for key, most in (("max_items", ARGS_MAX_ITEMS), ("max_length", ARG_MAX_LENGTH)):
            value = spec.get(key, most)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ParameterError(f"Parameter {name}: {key} must be a whole number from 1 to {most}.", name=name)
        spec.setdefault("default", [])
    elif kind == "credential":
        accepts = spec.get("credential_kind")
        if accepts not in CREDENTIAL_KINDS:
            raise ParameterError(f"Parameter {name}: credential_kind must be one of {', '.join(CREDENTIAL_KINDS)}.",
                                 name=name)
        if accepts == "git-ssh" and (problem := policy.mount_path_problem(spec.get("mount_path"))):
            raise ParameterError(f"Parameter {name}: {problem}", name=name)
        spec["default"] = _coerce_credential(spec, spec.get("default") or "")
    elif kind in SOURCE_TYPES:
        if problem := policy.mount_path_problem(spec.get("mount_path")):
            raise ParameterError(f"Parameter {name}: {problem}", name=name)
        if kind == "volume" and not isinstance(spec.setdefault("read_only", True), bool):
            raise ParameterError(f"Parameter {name}: read_only must be true or false.", name=name)
        if kind == "git":
            prefixes = spec.get("prefixes") or []
            if not isinstance(prefixes, list) or not all(isinstance(p, str) and policy.git_source_entry(p) for p in prefixes):
                raise ParameterError(f"Parameter {name}: prefixes are hosts, optionally with a path, "
                                     "e.g. [\"github.com/acme\"].", name=name)
        coerce = _coerce_volume if kind == "volume" else _coerce_git
        spec["default"] = coerce(spec, spec.get("default") or ("" if kind == "volume" else {}))
    else:
        names = spec.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ParameterError(f"Parameter {name} must declare the variable names people may set, e.g. "
                                 "[\"DATA_DIR\"].", name=name)
        for variable in names:
            if problem := policy.env_problem(variable):
                raise ParameterError(f"Parameter {name}: {problem}", name=name)
        spec.setdefault("default", {})


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _coerce_image(spec: dict[str, Any], raw: Any) -> str:
    name, image = spec["name"], str(raw).strip()
    if policy.image_name(image) is None:
        raise ParameterError(f"{name}: “{image[:200]}” is not a container image reference (registry/repository:tag).",
                             name=name)
    prefixes = spec.get("prefixes") or []
    if prefixes and not policy.image_allowed(image, prefixes):
        raise ParameterError(f"{name}: the image {image} is not under {', '.join(prefixes)}, where this template takes "
                             "images from.", name=name)
    return image


def _coerce_args(spec: dict[str, Any], raw: Any) -> list[str]:
    """A list of arguments; from a form, one per line. Each is handed to the program as it is."""
    name = spec["name"]
    items = raw.splitlines() if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ParameterError(f"{name} must be a list of arguments (text), one per line.", name=name)
    items = [item for item in items if item.strip()] if isinstance(raw, str) else items
    most, longest = spec.get("max_items", ARGS_MAX_ITEMS), spec.get("max_length", ARG_MAX_LENGTH)
    if len(items) > most:
        raise ParameterError(f"{name} takes at most {most} arguments, not {len(items)}.", name=name)
    for item in items:
        if len(item) > longest:
            raise ParameterError(f"{name}: an argument may be at most {longest} characters; “{item[:40]}…” is "
                                 f"{len(item)}.", name=name)
        if _CONTROL.search(item):
            raise ParameterError(f"{name}: an argument may not hold control characters (a new line, a NUL).", name=name)
    return list(items)


def _coerce_env(spec: dict[str, Any], raw: Any) -> dict[str, str]:
    """Variables among the declared names; from a form, NAME=value, one per line."""
    name, allowed = spec["name"], list(spec.get("names") or [])
    if isinstance(raw, str):
        pairs: dict[str, Any] = {}
        for line in raw.splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ParameterError(f"{name}: write each variable as NAME=value, not “{line[:60]}”.", name=name)
            pairs[key.strip()] = value
        raw = pairs
    if not isinstance(raw, dict):
        raise ParameterError(f"{name} must be variables and their values, e.g. {{\"{allowed[0]}\": \"…\"}}.", name=name)
    for key, value in raw.items():
        if key not in allowed:
            raise ParameterError(f"{name}: this template lets you set {', '.join(allowed)}, not “{str(key)[:60]}”.",
                                 name=name)
        if not isinstance(value, str) or len(value) > ENV_VALUE_MAX_LENGTH or "\x00" in value:
            raise ParameterError(f"{name}: {key} must be text of at most {ENV_VALUE_MAX_LENGTH} characters, "
                                 "without NUL.", name=name)
    return {key: raw[key] for key in sorted(raw)}


def _coerce_volume(spec: dict[str, Any], raw: Any) -> str:
    """The name of a claim; whether the team has it is asked of the cluster at launch."""
    name, claim = spec["name"], raw.strip() if isinstance(raw, str) else raw
    if not isinstance(claim, str) or (claim and not policy.claim_name_valid(claim)):
        shown = claim[:80] if isinstance(claim, str) else claim
        raise ParameterError(f"{name}: “{shown}” is not the name of a data volume (lowercase letters, digits, '-' and "
                             "'.', starting and ending with a letter or digit).", name=name)
    return claim


def _coerce_credential(spec: dict[str, Any], raw: Any) -> str:
    """The name of one of the team's credentials; whether the team has it is asked at launch."""
    name, chosen = spec["name"], raw.strip() if isinstance(raw, str) else raw
    if not isinstance(chosen, str) or (chosen and not CREDENTIAL_NAME.match(chosen)):
        shown = chosen[:80] if isinstance(chosen, str) else chosen
        raise ParameterError(f"{name}: “{shown}” is not the name of a credential (lowercase letters, digits and '-', "
                             "starting and ending with a letter or digit).", name=name)
    return chosen


def _coerce_git(spec: dict[str, Any], raw: Any) -> dict[str, str]:
    """A repository and a revision (branch, tag or commit); nothing when the URL is empty."""
    name = spec["name"]
    if isinstance(raw, str):
        raw = {"url": raw, "revision": ""}
    if not isinstance(raw, dict) or set(raw) - {"url", "revision"} or not all(isinstance(v, str) for v in raw.values()):
        raise ParameterError(f"{name} must be a repository URL and a revision, e.g. "
                             "{\"url\": \"https://github.com/acme/train.git\", \"revision\": \"main\"}.", name=name)
    url, revision = raw.get("url", "").strip(), raw.get("revision", "").strip()
    if not url:
        if revision:
            raise ParameterError(f"{name}: a revision needs a repository URL.", name=name)
        return {}
    if problem := policy.git_url_problem(url):
        raise ParameterError(f"{name}: {problem}", name=name)
    prefixes = spec.get("prefixes") or []
    if prefixes and not policy.git_url_allowed(url, prefixes):
        raise ParameterError(f"{name}: the repository {url} is not under {', '.join(prefixes)}, where this template "
                             "takes code from.", name=name)
    revision = revision or "HEAD"
    if problem := policy.git_revision_problem(revision):
        raise ParameterError(f"{name}: {problem}", name=name)
    return {"url": url, "revision": revision}


def _coerce(spec: dict[str, Any], raw: Any) -> Any:
    name, kind = spec["name"], spec["type"]
    if kind == "volume":
        return _coerce_volume(spec, raw)
    if kind == "credential":
        return _coerce_credential(spec, raw)
    if kind == "git":
        return _coerce_git(spec, raw)
    if kind == "image":
        return _coerce_image(spec, raw)
    if kind == "args":
        return _coerce_args(spec, raw)
    if kind == "env":
        return _coerce_env(spec, raw)
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
        if spec["type"] in ("volume", "credential") and (raw is None or raw == ""):
            values[name] = ""  # no volume or credential mounted
            continue
        if spec["type"] in ("args", "env", "git") and (raw is None or raw == ""):
            raw = {"args": [], "env": {}, "git": {}}[spec["type"]]
        if raw is None or raw == "":
            if spec["type"] == "bool":
                raw = False
            else:
                raise ParameterError(f"{name} needs a value.", name=name)
        values[name] = _coerce(spec, raw)
    return values


# A placeholder's format, Python's format mini-language in ASCII ([[fill]align][sign][z][#][0]
# [width][grouping][.precision][type]): format() also reads a width written "٣", and a nested
# {name} in it would take the width from a value a launch chooses.
FORMAT_SPEC = re.compile(r"(?:[^{}\n]?[<>=^])?[-+ ]?z?#?0?(?P<width>[0-9]+)?[,_]?(?:\.(?P<precision>[0-9]+))?"
                         r"[bcdeEfFgGnosxX%]?")
# The widest padding and the longest precision a placeholder may ask for: enough to align a column
# or print a learning rate, not enough to turn {epochs:>999999999} into a gigabyte in every process
# that builds the pod.
FORMAT_MOST = 64
# What one placeholder may become, and a whole argument or variable once filled: checked as it is
# filled, so a version saved before the bounds above cannot make a process hold more.
VALUE_MOST = ARG_MAX_LENGTH
RENDERED_MOST = 64 * 1024
_CONVERSIONS: dict[str, Callable[[object], str]] = {"s": str, "r": repr, "a": ascii}


@dataclass(frozen=True)
class Placeholder:
    name: str
    conversion: str | None
    spec: str


def placeholders(text: str) -> list[tuple[str, Placeholder | None]]:
    """A template's argument or variable as literal text and the {name} placeholder after it.
    Anything else str.format would read is refused in words: a brace alone, a placeholder without
    a name or numbered ({} or {0}, which str.format fills from arguments the portal never passes),
    an attribute or an item ({x.real}, {x[0]}), a format holding another placeholder, or a width or
    precision beyond FORMAT_MOST."""
    shown = text[:80]
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        raise ParameterError(f"“{shown}” has a brace that opens or closes no placeholder; write {{{{ or }}}} for a "
                             "brace itself.") from None
    pieces: list[tuple[str, Placeholder | None]] = []
    for literal, field, spec, conversion in parsed:
        if field is None:
            pieces.append((literal, None))
            continue
        if not field.strip():
            raise ParameterError(f"“{shown}” has a placeholder without a name, {{}}; write the parameter it stands "
                                 "for inside the braces, e.g. {epochs}.")
        if field.isdecimal():
            raise ParameterError(f"“{shown}” has a numbered placeholder, {{{field[:20]}}}; a placeholder names a "
                                 "parameter, e.g. {epochs}.")
        if not NAME.fullmatch(field):
            raise ParameterError(f"“{shown}” has a placeholder that is not a plain parameter name.")
        where = f"The placeholder {{{field}}} in “{shown}”"
        if conversion is not None and conversion not in _CONVERSIONS:
            raise ParameterError(f"{where} asks for the conversion !{conversion}; only !s, !r and !a exist.", name=field)
        spec = spec or ""
        if "{" in spec:
            raise ParameterError(f"{where} has another placeholder in its format; write the width or precision as "
                                 "a number, e.g. {epochs:>4}.", name=field)
        form = FORMAT_SPEC.fullmatch(spec)
        if form is None:
            raise ParameterError(f"{where} has the format “{spec[:40]}”, which is not one Python reads (e.g. {{lr:.4f}} "
                                 "or {epochs:>4}), or holds characters other than ASCII.", name=field)
        for part in ("width", "precision"):
            asked = form[part]
            # Compared as text first: int() refuses more than 4,300 digits with its own error.
            if asked is not None and (len(asked.lstrip("0")) > 4 or int(asked) > FORMAT_MOST):
                shown_number = asked.lstrip("0")[:20] + ("…" if len(asked.lstrip("0")) > 20 else "")
                raise ParameterError(f"{where} asks for a {part} of {shown_number}; a placeholder's width and "
                                     f"precision may be at most {FORMAT_MOST}.", name=field)
        pieces.append((literal, Placeholder(name=field, conversion=conversion, spec=spec)))
    return pieces


def render(text: str, values: dict[str, Any]) -> str:
    """Fills {name} placeholders. Values are whole arguments or variables, never shell text; a
    list or a set of variables is never a placeholder's value (they are added whole, below). Each
    placeholder is checked before it is filled and each value bounded after (VALUE_MOST, and the
    whole text RENDERED_MOST), so no template, however old, makes a process build a huge string."""
    scalars = {k: str(v).lower() if isinstance(v, bool) else v for k, v in values.items() if not isinstance(v, list | dict)}
    filled: list[str] = []
    length = 0
    for literal, placeholder in placeholders(text):
        filled.append(literal)
        length += len(literal)
        if placeholder is None:
            continue
        name = placeholder.name
        if name not in scalars:
            raise ParameterError(f"The template refers to {{{name}}}, which is not one of its parameters.")
        value = scalars[name]
        if placeholder.conversion is not None:
            value = _CONVERSIONS[placeholder.conversion](value)
        try:
            value = format(value, placeholder.spec)
        except (ValueError, TypeError):
            raise ParameterError(f"The placeholder {{{name}:{placeholder.spec}}} does not suit the value "
                                 f"{str(value)[:40]} of {name}: a format like .4f is for numbers, and a whole "
                                 "number takes no precision.", name=name) from None
        if len(value) > VALUE_MOST:
            raise ParameterError(f"The placeholder {{{name}}} fills in {len(value):,} characters; a placeholder may "
                                 f"fill in at most {VALUE_MOST:,}.", name=name)
        filled.append(value)
        length += len(value)
    if length > RENDERED_MOST:
        raise ParameterError(f"“{text[:80]}” comes to {length:,} characters once filled in; an argument or variable "
                             f"may be at most {RENDERED_MOST:,}.")
    return "".join(filled)


def check_placeholders(*, declared: list[dict[str, Any]], texts: Iterable[str]) -> None:
    """Whether each text of a template (its arguments, its variables' values) fills in from the
    declared parameters' defaults: run when the template is saved, after check_declarations, so
    a refusal names the placeholder there rather than at every launch."""
    defaults = validate_parameters(declared=declared, given={})
    for text in texts:
        render(str(text), defaults)


def chosen_work(*, declared: list[dict[str, Any]], values: dict[str, Any]) -> tuple[str | None, list[str], dict[str, str]]:
    """The image (None: the template's own), the arguments to add after the template's, and the
    variables to add to its environment, from the values of a launch."""
    image: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    for spec in declared:
        value = values.get(spec["name"])
        if spec.get("type") == "image" and isinstance(value, str):
            image = value
        elif spec.get("type") == "args" and isinstance(value, list):
            args.extend(str(item) for item in value)
        elif spec.get("type") == "env" and isinstance(value, dict):
            env.update({str(k): str(v) for k, v in value.items()})
    return image, args, env


@dataclass(frozen=True)
class ChosenCredential:
    """A credential a launch chose, by the name the team knows it by."""

    name: str
    kind: str
    mount_path: str = ""  # a git deploy key's


@dataclass(frozen=True)
class ChosenSources:
    """The data a launch mounts, in the order the template declares it."""

    volumes: tuple[VolumeMount, ...] = ()
    repositories: tuple[GitSource, ...] = ()
    credentials: tuple[ChosenCredential, ...] = ()


def chosen_sources(*, declared: list[dict[str, Any]], values: dict[str, Any]) -> ChosenSources:
    volumes, repositories, credentials = [], [], []
    for spec in declared:
        value = values.get(spec["name"])
        if spec.get("type") == "volume" and isinstance(value, str) and value:
            volumes.append(VolumeMount(claim=value, mount_path=str(spec["mount_path"]),
                                       read_only=spec.get("read_only", True) is not False))
        elif spec.get("type") == "git" and isinstance(value, dict) and value.get("url"):
            repositories.append(GitSource(url=str(value["url"]), revision=str(value["revision"]),
                                          mount_path=str(spec["mount_path"])))
        elif spec.get("type") == "credential" and isinstance(value, str) and value:
            credentials.append(ChosenCredential(name=value, kind=str(spec["credential_kind"]),
                                                mount_path=str(spec.get("mount_path") or "")))
    return ChosenSources(volumes=tuple(volumes), repositories=tuple(repositories), credentials=tuple(credentials))
