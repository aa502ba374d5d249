"""The demo command seeds a believable site once and prints who can log in."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from jobs.models import WorkloadTemplate
from portal.models import User
from tenants.models import Department, Flavor, QuotaRequest, Team

pytestmark = pytest.mark.django_db


def test_the_demo_has_teams_people_flavors_requests_in_every_state_and_templates():
    out = StringIO()
    call_command("seed_demo", stdout=out)

    assert sorted(Team.objects.values_list("slug", flat=True)) == ["nlp", "recsys", "vision"]
    resource_names = {f.resource_name for f in Flavor.objects.all()}
    assert resource_names == {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "cpu"}
    assert set(QuotaRequest.objects.values_list("status", flat=True)) == set(QuotaRequest.Status.values)
    assert sorted(WorkloadTemplate.objects.values_list("kind", flat=True)) == [
        "distributed", "inference", "notebook", "notebook", "training", "training", "workspace"]
    assert User.objects.get(username="admin").is_platform_admin and User.objects.get(username="finance").is_finance
    assert "password for all: gpu-portal-demo" in out.getvalue() and "lena     lead of vision" in out.getvalue()
    research = Department.objects.get(slug="research")
    assert sorted(research.teams.values_list("slug", flat=True)) == ["nlp", "vision"]
    assert {row.flavor.slug: row.units for row in research.pool_in_force()} == {"t4-shared": 8}

    call_command("seed_demo", stdout=StringIO())
    assert Team.objects.count() == 3 and WorkloadTemplate.objects.count() == 7


def test_the_demo_has_prices_for_every_flavor():
    from billing.models import Rate

    call_command("seed_demo", stdout=StringIO())
    assert Rate.objects.count() == Flavor.objects.count() == 4


def _billing_state() -> tuple:
    from billing.models import Budget, Rate, UsageHour
    from jobs.models import RunInterval, Workload
    from portal.models import AuditEvent

    return (RunInterval.objects.count(), Workload.objects.count(), Rate.objects.count(),
            sorted(UsageHour.objects.values_list("hour", "account__slug", "flavor__slug", "owner_username", "unit_seconds")),
            list(Budget.objects.values_list("account__slug", "amount")), AuditEvent.objects.filter(action="budget.set").count())


def test_the_demo_shows_billing_each_teams_days_since_last_month_metered_priced_and_a_budget_for_vision(client):
    from decimal import Decimal

    from django.utils import timezone

    from billing import metering, periods
    from billing.models import Account, Budget
    from billing.usage import selectors
    from demo.history import history_start
    from jobs.models import RunInterval

    call_command("seed_demo", stdout=StringIO())

    now = timezone.now()
    since, today = history_start(now), periods.local_date(now)
    report = selectors.usage_report(accounts=Account.objects.all(), start=periods.local_date(since), end=today,
                                    by=("team", "day"))
    days = {(row["team"], row["day"]) for row in report.rows if row["cost"] > 0}
    for team in ("vision", "nlp", "recsys"):
        assert sum(1 for slug, _ in days if slug == team) >= (today - periods.local_date(since)).days, (
            f"{team} has too few priced days")
    # Every interval is closed, metered and settled; the rollups equal a recomputation exactly.
    assert not RunInterval.objects.filter(ended_at__isnull=True).exists()
    assert not RunInterval.objects.filter(settled=False).exists()
    metered = metering.watermark()
    assert metered is not None
    assert metering.recompute(start=since, end=metered) == []
    budget = Budget.objects.get()
    assert (budget.account.slug, budget.amount, budget.currency, budget.hard_stop) == ("vision", Decimal("1500"), "USD",
                                                                                       False)

    client.login(username="lena", password="gpu-portal-demo")
    html = client.get("/billing/teams/vision/", {"month": f"{today:%Y-%m}"}).content.decode()
    assert 'hx-get="/billing/budgets/vision/bar/"' in html
    assert 'data-testid="top-workloads"' in html and "detector-nightly" in html
    bar = client.get("/billing/budgets/vision/bar/").content.decode()
    assert 'data-testid="budget-bar"' in bar and "USD of 1,500.00 USD used in" in bar


def test_seeding_the_demo_again_changes_no_billing_and_keeps_the_budget_finance_set(django_capture_on_commit_callbacks):
    from billing.budgets import services as budgets
    from billing.models import Budget

    call_command("seed_demo", stdout=StringIO())
    budgets.budget_set(actor=User.objects.get(username="finance"), team=Team.objects.get(slug="vision"), amount="9000")
    before = _billing_state()
    call_command("seed_demo", stdout=StringIO())
    assert _billing_state() == before
    assert Budget.objects.get().amount == 9000


def test_a_demo_site_seeded_before_billing_gets_its_history_when_seeded_again():
    from django.utils import timezone

    from billing.models import UsageHour
    from demo import history, site

    now = timezone.now()
    site.site_seed(now=now, since=history.history_start(now))  # people, teams, templates: a site seeded before billing
    assert not UsageHour.objects.exists()
    call_command("seed_demo", stdout=StringIO())
    assert set(UsageHour.objects.values_list("account__slug", flat=True)) == {"vision", "nlp", "recsys"}


def test_the_demo_cluster_has_the_runtime_class_the_gpu_operator_installs_and_any_a_demo_flavor_names(simulated):
    call_command("seed_demo", stdout=StringIO())
    Flavor.objects.filter(slug="t4-shared").update(runtime_class_name="nvidia-cdi")
    out = StringIO()
    call_command("seed_demo", stdout=out)
    names = {rc["metadata"]["name"] for rc in simulated.list("node.k8s.io/v1", "RuntimeClass")[0]}
    assert names == {"nvidia", "nvidia-cdi"}
    assert "The cluster has the RuntimeClasses nvidia, nvidia-cdi." in out.getvalue()


def test_a_demo_on_volcano_also_has_an_mpi_template_that_launches(settings, django_capture_on_commit_callbacks):
    from jobs import services as job_services

    settings.PORTAL_QUEUE_BACKEND = "volcano"
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_demo", stdout=StringIO())
    mpi = WorkloadTemplate.objects.get(kind="mpi")
    vision = Team.objects.get(slug="vision")
    lead = vision.memberships.get(role="lead").user
    job_services.check_launch(user=lead, request=job_services.LaunchRequest(
        team=vision, template=mpi, flavor=Flavor.objects.get(slug="h100-80gb"), units=1, parameters={"workers": 2}))
