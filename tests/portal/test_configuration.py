"""Every setting is declared once (portal/configuration.py), the settings module reads the
environment only through that declaration, and docs/configuration.md is what it writes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from portal import configuration

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "portal" / "settings.py"
READERS = {"text", "boolean", "whole", "optional_whole", "number", "items", "labels", "rate", "namespace", "json_object",
           "gateway_reference", "service_reference"}
IMPLIED = {"production": "PORTAL_PRODUCTION"}  # readers of one setting, named by what they answer


def _names_read(source: str) -> set[str]:
    """The names the settings module passes to a reader of portal.configuration (imported as config)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "config"):
            continue
        if node.func.attr in IMPLIED:
            names.add(IMPLIED[node.func.attr])
        elif node.func.attr in READERS:
            first = node.args[0]
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), ast.unparse(node)
            names.add(first.value)
    return names


def _reads_the_environment_itself(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "environb"}:
            found.append(ast.unparse(node))
        if isinstance(node, ast.Import | ast.ImportFrom) and any(alias.name in {"os", "environ", "getenv"}
                                                                  for alias in node.names):
            found.append(ast.unparse(node))
    return found


def test_the_settings_module_reads_the_environment_only_through_the_declaration():
    assert _reads_the_environment_itself(SETTINGS.read_text()) == []


def test_every_setting_the_settings_module_reads_is_declared():
    undeclared = _names_read(SETTINGS.read_text()) - set(configuration.DECLARED)
    assert not undeclared, f"declare {sorted(undeclared)} in portal/configuration.py"


def test_every_declared_setting_is_read_by_the_settings_module():
    unread = set(configuration.DECLARED) - _names_read(SETTINGS.read_text())
    assert not unread, f"{sorted(unread)} are declared (and documented) but portal/settings.py never reads them"


def test_a_read_the_environment_gets_past_the_declaration_is_found():
    source = SETTINGS.read_text() + '\nimport os\nEXTRA = os.environ.get("EXTRA")\nMORE = config.text("MORE")\n'
    assert _reads_the_environment_itself(source) == ["import os", "os.environ"]
    assert _names_read(source) - set(configuration.DECLARED) == {"MORE"}


def test_a_setting_read_without_a_declaration_stops_the_start(monkeypatch):
    monkeypatch.setenv("PORTAL_SOMETHING_NEW", "1")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_SOMETHING_NEW is read as a setting but portal/configuration.py"):
        configuration.text("PORTAL_SOMETHING_NEW")


def test_a_setting_is_read_as_the_type_it_is_declared_with():
    with pytest.raises(ImproperlyConfigured, match="PORTAL_TEAM_MAX_WORKLOADS is declared as whole number, not read as"):
        configuration.text("PORTAL_TEAM_MAX_WORKLOADS")


def test_a_default_lives_in_the_declaration_unless_it_is_computed_at_start():
    with pytest.raises(ImproperlyConfigured, match="TIME_ZONE's default is declared"):
        configuration.text("TIME_ZONE", "Europe/Berlin")
    with pytest.raises(ImproperlyConfigured, match="SITE_URL's default is declared"):
        configuration.text("SITE_URL", "http://elsewhere")
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT's default is computed"):
        configuration.text("LOG_FORMAT")


def test_a_missing_production_setting_stops_the_start_with_its_name(monkeypatch):
    monkeypatch.setenv("PORTAL_PRODUCTION", "1")
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL is not set. PORTAL_PRODUCTION is on"):
        configuration.text("REDIS_URL")
    monkeypatch.setenv("ALLOWED_HOSTS", "")
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_HOSTS is not set. PORTAL_PRODUCTION is on"):
        configuration.items("ALLOWED_HOSTS", "")


def test_a_list_set_but_empty_is_empty_and_unset_is_its_default(monkeypatch):
    monkeypatch.delenv("PORTAL_READINESS_CHECKS", raising=False)
    assert configuration.items("PORTAL_READINESS_CHECKS") == ["database", "broker", "worker", "beat", "watcher"]
    monkeypatch.setenv("PORTAL_READINESS_CHECKS", "")
    assert configuration.items("PORTAL_READINESS_CHECKS") == []
    monkeypatch.setenv("PORTAL_POD_LABELS", "")
    assert configuration.labels("PORTAL_POD_LABELS") == ()


def test_every_setting_says_its_effect_in_one_sentence_and_how_a_computed_default_is_found():
    for setting in configuration.SETTINGS:
        assert setting.group in configuration.GROUPS, setting.name
        assert setting.effect.endswith(".") and setting.effect[0].isupper() or setting.effect[0] == "`", setting.name
        assert (setting.default is None) == bool(setting.default_text), setting.name


def test_the_committed_configuration_reference_is_what_the_declaration_writes():
    page = ROOT / "docs" / "configuration.md"
    assert page.read_text() == configuration.reference(), "run: python manage.py settings_reference"
    for setting in configuration.SETTINGS:
        assert f"| `{setting.name}` |" in page.read_text()


def test_the_reference_command_says_when_the_page_is_out_of_date(tmp_path):
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration reference\n")
    with pytest.raises(CommandError, match="is not what portal/configuration.py declares"):
        call_command("settings_reference", "--check", "--output", str(stale))
    call_command("settings_reference", "--output", str(stale))
    call_command("settings_reference", "--check", "--output", str(stale))
    assert stale.read_text() == configuration.reference()
