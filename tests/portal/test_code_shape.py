"""The shape of the code, read from its source with ast (nothing is imported or run).

An import inside a function almost always hides an import cycle: two modules that each need the
other, which the code should instead untangle (enqueue a task by its name, move a function to the
module it belongs in, reverse the dependency). So imports stay at a module's top, but for the few
places below, each with its reason. And no function grows past a screen: a longer one is split
into the named steps a reader looks for.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("portal", "tenants", "jobs", "billing", "demo")
MOST_LINES = 60

# (file, function) pairs whose imports stay inside the function; a file of "*/apps.py" is any app's.
INNER_IMPORTS_ALLOWED = {
    # Django imports an app's signals and fills hooks in AppConfig.ready(), once every model is loaded.
    ("*/apps.py", "ready"),
    # The doors build the one backend settings choose; the others, and their client libraries, are
    # never imported.
    ("portal/kube/select.py", "gateway"),
    ("portal/metrics/select.py", "metrics"),
    # Django imports this package to find the app before models load; its gateway needs the models.
    ("portal/kube/simulated/__init__.py", "__getattr__"),
    # weasyprint loads Pango, a second that only a PDF statement needs.
    ("billing/statements/exports.py", "statement_pdf"),
}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def sources(root: Path = ROOT) -> Iterator[tuple[str, ast.Module]]:
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path.relative_to(root).as_posix(), ast.parse(path.read_text(), filename=str(path))


def functions(tree: ast.Module) -> Iterator[Function]:
    yield from (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def allowed(path: str, function: str) -> bool:
    return (path, function) in INNER_IMPORTS_ALLOWED or (
        path.endswith("/apps.py") and ("*/apps.py", function) in INNER_IMPORTS_ALLOWED)


def inner_imports(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """Each import inside a function that the allowlist does not name, as `path:line function`."""
    found = set()
    for path, tree in files:
        for function in functions(tree):
            if allowed(path, function.name):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.add(f"{path}:{node.lineno} {function.name}")
    return sorted(found)


def long_functions(files: Iterator[tuple[str, ast.Module]], most: int = MOST_LINES) -> list[str]:
    return sorted(f"{path}:{function.lineno} {function.name} ({lines} lines)"
                  for path, tree in files for function in functions(tree)
                  if (lines := (function.end_lineno or function.lineno) - function.lineno + 1) > most)


def test_imports_are_at_the_top_of_modules_but_for_the_allowed_places() -> None:
    assert inner_imports(sources()) == []


def test_no_function_is_longer_than_a_screen() -> None:
    assert long_functions(sources()) == []


def test_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    (tmp_path / "tenants").mkdir()
    (tmp_path / "tenants" / "services.py").write_text(
        "def team_delete():\n    from tenants import tasks\n    return tasks\n")
    (tmp_path / "tenants" / "apps.py").write_text(
        "class TenantsConfig:\n    def ready(self):\n        from tenants import signals\n")
    assert inner_imports(sources(tmp_path)) == ["tenants/services.py:2 team_delete"]


def test_a_function_over_the_limit_is_found(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    body = "".join(f"    x{n} = {n}\n" for n in range(MOST_LINES))
    (tmp_path / "demo" / "site.py").write_text(f"def site_seed():\n{body}\ndef short():\n    return 1\n")
    assert long_functions(sources(tmp_path)) == [f"demo/site.py:1 site_seed ({MOST_LINES + 1} lines)"]
