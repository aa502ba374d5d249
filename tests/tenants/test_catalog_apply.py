"""`manage.py catalog_apply`: the catalog an install declares (the chart's `catalog` value) is
created or updated by slug through the catalog's own checks and audit, all or nothing."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from portal.models import AuditEvent
from tenants.models import Flavor, QuotaGrant

pytestmark = pytest.mark.django_db

CATALOG = """
- preset: nvidia-h100
  capacity_units: 64
- preset: nvidia-a100
  slug: a100-big
  name: A100 big
  capacity_units: 16
- slug: t4
  name: T4
  resource_name: nvidia.com/gpu
  gpu_model: NVIDIA T4
  fraction: "1"
  capacity_units: 8
  node_labels: {nvidia.com/gpu.product: Tesla-T4}
"""


def test_a_catalog_file_adds_flavors_from_presets_and_own_fields_and_audits_each(tmp_path, capsys):
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    call_command("catalog_apply", str(path))
    h100 = Flavor.objects.get(slug="h100-80gb")
    assert (h100.capacity_units, h100.resource_name, h100.gpu_model) == (64, "nvidia.com/gpu", "NVIDIA H100 80GB HBM3")
    assert h100.node_labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and h100.tolerations
    assert Flavor.objects.get(slug="a100-big").name == "A100 big"
    assert (Flavor.objects.get(slug="t4").fraction_numerator, Flavor.objects.get(slug="t4").fraction_denominator) == (1, 1)
    assert AuditEvent.objects.filter(action="flavor.created").count() == 3
    assert "Catalog applied" in capsys.readouterr().out


def test_applying_again_updates_by_slug_and_leaves_other_flavors_alone(tmp_path, flavor, monkeypatch):
    monkeypatch.setenv("PORTAL_CATALOG", json.dumps([{"preset": "nvidia-h100", "capacity_units": 64}]))
    call_command("catalog_apply", env="PORTAL_CATALOG")
    monkeypatch.setenv("PORTAL_CATALOG", json.dumps([{"preset": "nvidia-h100", "capacity_units": 96}]))
    call_command("catalog_apply", env="PORTAL_CATALOG")
    assert Flavor.objects.filter(slug="h100-80gb").count() == 1
    assert Flavor.objects.get(slug="h100-80gb").capacity_units == 96
    assert Flavor.objects.filter(pk=flavor.pk).exists()  # not in the file: kept
    assert AuditEvent.objects.filter(action="flavor.updated", message__contains="capacity_units 64 → 96").exists()


@pytest.mark.parametrize(("catalog", "says"), [
    ("- preset: nvidia-h200\n  capacity_units: 8", "there is no preset “nvidia-h200”"),
    ("- preset: nvidia-h100\n  capacity: 8", "fields a flavor does not: capacity"),
    ("- preset: nvidia-h100", "needs a slug and capacity_units"),
    (("- preset: nvidia-h100\n  capacity_units: 8\n- slug: any\n  name: Any GPU\n  resource_name: nvidia.com/gpu\n"
     "  gpu_model: any\n  capacity_units: 8"), "node labels of one are all among the other's"),
    ("- slug: t4\n  name: T4\n  resource_name: nvidia.com/gpu\n  gpu_model: T4\n  fraction: one\n  capacity_units: 8",
     "fraction “one” is not a fraction"),
    ("- slug: t4\n  name: T4\n  resource_name: not a resource\n  gpu_model: T4\n  capacity_units: 8",
     "Catalog entry 2 (t4): resource_name: An extended resource name"),
    ("flavors: []", "must be a list of flavors"),
    ("- [1, 2]", "must be a mapping"),
])
def test_a_bad_entry_refuses_the_whole_file_in_words(tmp_path, catalog, says):
    path = tmp_path / "catalog.yaml"
    path.write_text("- preset: nvidia-a100\n  capacity_units: 8\n" + catalog if catalog.startswith("-") else catalog)
    with pytest.raises(CommandError) as refused:
        call_command("catalog_apply", str(path))
    assert "Nothing was changed" in str(refused.value) and says in str(refused.value)
    assert not Flavor.objects.exists()  # the good entry before it was rolled back too


def test_capacity_below_what_teams_are_guaranteed_is_refused(tmp_path, flavor, team):
    QuotaGrant.objects.create(team=team, flavor=flavor, units=4)
    path = tmp_path / "catalog.yaml"
    path.write_text(f"- slug: {flavor.slug}\n  capacity_units: 2\n")
    with pytest.raises(CommandError, match="guaranteed 4 units"):
        call_command("catalog_apply", str(path))
    assert Flavor.objects.get(pk=flavor.pk).capacity_units == flavor.capacity_units


def test_a_missing_file_or_variable_is_said_plainly(tmp_path):
    with pytest.raises(CommandError, match="Cannot read the catalog file"):
        call_command("catalog_apply", str(tmp_path / "none.yaml"))
    with pytest.raises(CommandError, match="PORTAL_NOPE is not set"):
        call_command("catalog_apply", env="PORTAL_NOPE")
