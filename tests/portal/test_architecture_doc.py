"""ARCHITECTURE.md is a map that stays true and short: every path (`foo/bar.py`, `foo/`) and
dotted name (`jobs.sync.sync_all`) it cites exists, every page it places resolves to a view, and
it fits on two screens, as the README does."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "ARCHITECTURE.md"
APPS = ("portal", "tenants", "jobs", "billing", "demo")
MOST_LINES = 150


def cited() -> list[str]:
    return re.findall(r"`([^`\n]+)`", MAP.read_text())


def is_path(token: str) -> bool:
    return "/" in token and not token.startswith("/") and " " not in token and "<" not in token


def is_dotted_name(token: str) -> bool:
    return bool(re.fullmatch(r"[a-z_]+(\.[A-Za-z_][A-Za-z0-9_]*)+", token)) and token.split(".")[0] in APPS \
        and not token.endswith((".py", ".html", ".md"))


def resolves(dotted: str) -> bool:
    """Imports the longest module prefix of the name, then walks the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_path_the_map_cites_exists():
    paths = [token for token in cited() if is_path(token)]
    assert len(paths) > 50
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, f"ARCHITECTURE.md cites paths that do not exist: {missing}"


def test_every_dotted_name_the_map_cites_exists():
    names = [token for token in cited() if is_dotted_name(token)]
    assert len(names) > 15
    missing = [name for name in names if not resolves(name)]
    assert not missing, f"ARCHITECTURE.md cites names that do not exist: {missing}"


def test_the_check_would_notice_a_name_or_path_that_moved():
    assert not resolves("jobs.sync.no_such_function") and not resolves("jobs.no_such_module.thing")
    assert resolves("jobs.sync.sync_all") and resolves("portal.kube.base.Gateway")
    assert is_path("jobs/kinds/") and not (ROOT / "jobs/no_such.py").exists()


def test_every_page_the_map_places_resolves_to_a_view():
    table = MAP.read_text().split("## Where each page's code lives", 1)[1].split("\n## ", 1)[0]
    urls = [token for line in table.splitlines()[2:] for token in re.findall(r"`(/[^`]*)`", line.split("|")[1])]
    assert len(urls) > 20
    for url in urls:
        # "/teams/…" stands for the pages under it: the prefix itself, a slug's or an id's.
        concrete = url.replace("<pk>", "1").replace("<slug>", "vision")
        assert any(_served(concrete.replace("…", rest)) for rest in ("", "vision/", "1/", "new/")), \
            f"ARCHITECTURE.md places a page at {url}, which no view serves"


def _served(url: str) -> bool:
    try:
        resolve(url)
    except Resolver404:
        return False
    return True


def test_the_map_and_the_readme_each_fit_in_150_lines():
    for page in (MAP, ROOT / "README.md"):
        lines = len(page.read_text().splitlines())
        assert lines <= MOST_LINES, f"{page.name} is {lines} lines; keep it a map, move notes to docs/"
