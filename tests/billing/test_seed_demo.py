"""The demo command seeds a believable site once and prints who can log in."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from jobs.models import WorkloadTemplate
from portal.models import User
from tenants.models import Flavor, QuotaRequest, Team

pytestmark = pytest.mark.django_db


def test_the_demo_has_teams_people_flavors_requests_in_every_state_and_templates():
    out = StringIO()
    call_command("seed_demo", stdout=out)

    assert sorted(Team.objects.values_list("slug", flat=True)) == ["nlp", "recsys", "vision"]
    resource_names = {f.resource_name for f in Flavor.objects.all()}
    assert resource_names == {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"}
    assert set(QuotaRequest.objects.values_list("status", flat=True)) == set(QuotaRequest.Status.values)
    assert sorted(WorkloadTemplate.objects.values_list("kind", flat=True)) == ["distributed", "inference", "notebook", "training"]
    assert User.objects.get(username="admin").is_platform_admin and User.objects.get(username="finance").is_finance
    assert "password for all: gpu-portal-demo" in out.getvalue() and "lena     lead of vision" in out.getvalue()

    call_command("seed_demo", stdout=StringIO())
    assert Team.objects.count() == 3 and WorkloadTemplate.objects.count() == 4


def test_the_demo_has_prices_for_every_flavor():
    from billing.models import Rate

    call_command("seed_demo", stdout=StringIO())
    assert Rate.objects.count() == Flavor.objects.count() == 3
