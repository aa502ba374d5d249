"""What a template may hold, whoever writes it: images only from allowed registries, no
environment variable that changes what code runs or where traffic goes, and limits within the
bounds of a real GPU node. Pure: no Django; the model validators, the services, the serializers
and the admin ask the same functions, so they refuse with the same sentence."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# --- Limits ---------------------------------------------------------------------------------

DAY = 24 * 3600
# The bounds of each number a template version holds: (lowest, highest). Highest is what one pod
# on the largest GPU node could use, or a month of run time; anything larger is a typo or an attempt
# to hold the cluster, and either way not something to run.
LIMITS: dict[str, tuple[int, int]] = {
    "default_units": (1, 128),
    "max_units": (1, 128),  # GPU units per pod: 8 GPUs × 7 MIG slices is 56; time-sliced shares go higher
    "default_cpu": (1, 256),
    "max_cpu": (1, 256),
    "default_memory_gib": (1, 4096),
    "max_memory_gib": (1, 4096),
    "max_runtime_seconds": (60, 30 * DAY),
    "storage_gib": (0, 4096),
    "idle_minutes": (0, 7 * 24 * 60),
    "port": (0, 65535),
}
# The highest pod count (workers of a distributed job, replicas of a server) a template may offer.
MAX_POD_COUNT = 64

WORDS = {
    "default_units": "The default GPU units", "max_units": "The maximum GPU units",
    "default_cpu": "The default CPU cores", "max_cpu": "The maximum CPU cores",
    "default_memory_gib": "The default memory (GiB)", "max_memory_gib": "The maximum memory (GiB)",
    "max_runtime_seconds": "The maximum run time (seconds)", "storage_gib": "The notebook storage (GiB)",
    "idle_minutes": "The idle time (minutes)", "port": "The port",
}


def limit_problem(field: str, value: object) -> str | None:
    """A sentence saying why `value` cannot be the template's `field`, or None when it can."""
    low, high = LIMITS[field]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"“{value}”"
        return f"{WORDS[field]} must be a whole number from {low:,} to {high:,}, not {shown}."
    return None


# --- Images -----------------------------------------------------------------------------------

DOCKER_HUB = "docker.io"
_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# The reference grammar of container images (distribution/reference): [host[:port]/]path[:tag][@digest].
IMAGE = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}))?$"
)
ENTRY = re.compile(rf"^(?P<host>{_HOST})(?:/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*))?$")


@dataclass(frozen=True)
class ImageName:
    host: str  # lowercase; docker.io for Docker Hub
    path: str  # the repository, e.g. library/python, pytorch/pytorch

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.path}"


def _is_host(first: str) -> bool:
    # As container runtimes read it: a first part with a dot or a port, or localhost, is a registry.
    return "." in first or ":" in first or first == "localhost"


def image_name(image: str) -> ImageName | None:
    """Where an image comes from, as a container runtime would pull it; None for what is not an image reference."""
    match = IMAGE.match(image.strip()) if len(image) <= 512 else None
    if match is None:
        return None
    host, path = match["host"], match["path"]
    if host is not None and not _is_host(host):
        host, path = None, f"{host}/{path}"  # "pytorch/pytorch": a Docker Hub user, not a host
    host = (host or DOCKER_HUB).lower()
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return ImageName(host=host, path=path)


def registry_entry(text: str) -> str | None:
    """An allow-list entry in its one written form (`host[/path]`, lowercase host, Docker Hub as
    docker.io), or None when it is not one."""
    match = ENTRY.match(text.strip().rstrip("/"))
    if match is None or not _is_host(match["host"]):
        return None
    host = match["host"].lower()
    host = DOCKER_HUB if host in _HUB_ALIASES else host
    return f"{host}/{match['path']}" if match["path"] else host


def _under(repository: str, entries: Iterable[str]) -> bool:
    """Whether `host/path` lies under an allow-list entry: the entry is its host, or its host and
    a leading part of its path, whole segments only (ghcr.io/acme does not allow ghcr.io/acme-evil)."""
    return any(entry and (repository == entry or repository.startswith(f"{entry}/")) for entry in entries)


def image_allowed(image: str, entries: Iterable[str]) -> bool:
    """Whether the image comes from an allowed registry (`_under`)."""
    name = image_name(image)
    return name is not None and _under(name.repository, entries)


def image_problem(image: str, entries: list[str]) -> str | None:
    if not image.strip():
        return "A template needs a container image."
    if image_name(image) is None:
        return f"“{image[:200]}” is not a container image reference (registry/repository:tag)."
    if not image_allowed(image, entries):
        allowed = ", ".join(sorted(entries)) if entries else "none yet (a platform admin adds them)"
        return f"The image {image} is not from an allowed registry; allowed: {allowed}."
    return None


# --- Environment -------------------------------------------------------------------------------

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Variables a template may not set, because they change what code a process loads or which
# certificates it trusts and where its traffic goes, or the GPUs it sees; or because the portal
# sets them itself. Compared without regard to case (http_proxy is read as often as HTTP_PROXY).
REFUSED_ENV_PREFIXES = (
    "LD_",  # the dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...
    "DYLD_",
    "NVIDIA_",  # NVIDIA_VISIBLE_DEVICES=all would show the container every GPU of the node
    "GPU_PORTAL_",
)
REFUSED_ENV_SUFFIXES = ("_PROXY",)  # HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, ...
REFUSED_ENV_NAMES = frozenset({
    # interpreters loading code before the program's own
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONBREAKPOINT", "PYTHONWARNINGS",
    "PYTHONINSPECT", "PYTHONEXECUTABLE", "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT",
    "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "BASH_ENV", "ENV", "PROMPT_COMMAND",
    "SHELLOPTS", "BASHOPTS", "IFS",
    # certificates trusted, so a proxy could read TLS
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
    # what the portal sets for the workload
    "JUPYTER_TOKEN", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
})


def env_problem(name: str) -> str | None:
    """A sentence saying why a template may not set this environment variable, or None."""
    if not ENV_NAME.match(name):
        return (f"“{name[:130]}” is not an environment variable name: letters, digits and underscores, "
                "not starting with a digit.")
    upper = name.upper()
    if (upper in REFUSED_ENV_NAMES or upper.startswith(REFUSED_ENV_PREFIXES) or upper.endswith(REFUSED_ENV_SUFFIXES)
            or upper == "PROXY"):
        return (f"A template may not set {name}: it would change what code the container loads, which certificates "
                "it trusts, where its traffic goes or which GPUs it sees, or the portal sets it itself.")
    return None


# --- Data: volumes and repositories ----------------------------------------------------------------

# A PersistentVolumeClaim's name: a DNS-1123 subdomain, ASCII only (str.isalnum would take "é").
CLAIM_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$")
MOUNT_PATH = re.compile(r"^(?:/[A-Za-z0-9_][A-Za-z0-9._-]{0,62}){1,8}$")
# Where a mount would hide or replace what the image or the kubelet puts there.
RESERVED_MOUNT_PATHS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run", "/sbin",
                        "/sys", "/usr", "/var/run", "/home/jovyan/work")


def claim_name_valid(name: str) -> bool:
    return bool(CLAIM_NAME.fullmatch(name)) and ".." not in name


def mount_path_problem(path: object) -> str | None:
    """Why a template may not mount a volume or repository at `path`, or None. The template
    declares it; a launch never chooses where anything is mounted."""
    if not isinstance(path, str) or not MOUNT_PATH.fullmatch(path) or any(part in (".", "..") for part in path.split("/")):
        return (f"the mount path must be an absolute path of plain names (letters, digits, '.', '_', '-'), "
                f"e.g. /data, not “{str(path)[:80]}”.")
    if any(path == reserved or path.startswith(f"{reserved}/") for reserved in RESERVED_MOUNT_PATHS):
        return f"{path} would hide part of the system or the notebook's own storage; choose a path such as /data."
    return None


GIT_HOST = re.compile(rf"^(?P<host>{_HOST})$")
_GIT_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9._~-]{0,99}"
# Only https, with no user, password, query or fragment: no file://, ssh, ext:: or other transports.
GIT_URL = re.compile(rf"^https://(?P<host>{_HOST})/(?P<path>{_GIT_SEGMENT}(?:/{_GIT_SEGMENT}){{0,9}})/?$")
GIT_ENTRY = re.compile(rf"^(?P<host>{_HOST})(?:/(?P<path>{_GIT_SEGMENT}(?:/{_GIT_SEGMENT}){{0,9}}))?$")
# A branch, tag or commit: the characters git allows in a ref name that need no quoting, never
# starting with '-' (an option) and without git's own syntax ("..", "@{", a trailing ".lock").
GIT_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$")


def git_source_entry(text: str) -> str | None:
    """A repository allow-list entry in its one form (`host[/path]`, lowercase host), or None."""
    match = GIT_ENTRY.fullmatch(text.strip().removeprefix("https://").rstrip("/"))
    if match is None or "." not in match["host"] or ".." in (match["path"] or ""):
        return None
    host = match["host"].lower()
    return f"{host}/{match['path']}" if match["path"] else host


def git_url_problem(url: str) -> str | None:
    match = GIT_URL.fullmatch(url) if len(url) <= 512 else None
    if match is None or any(part in (".", "..") for part in match["path"].split("/")):
        return (f"“{url[:120]}” is not a repository URL this portal fetches: write https://host/path, without a user, "
                "password, query or another transport (file://, ssh, ext::).")
    return None


def git_url_allowed(url: str, entries: Iterable[str]) -> bool:
    """Whether the repository lies under an allowed entry (`_under`, as images do): an entry may
    also name the one repository (github.com/acme/train allows https://github.com/acme/train)."""
    match = GIT_URL.fullmatch(url) if len(url) <= 512 else None
    return match is not None and _under(f"{match['host'].lower()}/{match['path'].rstrip('/')}", entries)


# A commit id shortened (7 to 39 hex digits, at least one a digit): git fetches a commit only by
# its full id, so the pod's fetch would fail minutes after the launch had looked fine.
ABBREVIATED_COMMIT = re.compile(r"^(?=[a-f]*[0-9])[0-9a-f]{7,39}$")


def git_revision_problem(revision: str) -> str | None:
    if (not GIT_REVISION.fullmatch(revision) or ".." in revision or "//" in revision or revision.endswith((".lock", "/", "."))
            or "/." in revision):
        return (f"“{revision[:80]}” is not a branch, tag or commit: letters, digits and . _ / + - only, not starting "
                "with '-'.")
    if ABBREVIATED_COMMIT.fullmatch(revision):
        return (f"“{revision}” looks like a shortened commit id, which git cannot fetch; give the full 40-character "
                "commit id, a branch or a tag.")
    return None
