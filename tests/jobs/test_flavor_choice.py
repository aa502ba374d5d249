"""The flavor a member picks is the flavor that runs and is billed (issue 22 §1), on the simulated
cluster and through the services, forms and API; tests/contract/test_flavor_choice_contract.py
runs the same promise on the real control plane."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from billing.rates import services as billing_services
from jobs import pricing, services, sync
from jobs.models import RunInterval, Workload
from portal import hooks
from portal.errors import DomainError
from tenants import services as tenant_services
from tenants.models import Flavor
from tests.factories import FlavorFactory
from tests.helpers import api, ensure_priced, launch, make_ready

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(db):
    return FlavorFactory(name="A100 80GB", slug="a100-80gb", resource_name="nvidia.com/gpu", capacity_units=8,
                         node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})


@pytest.fixture
def either(admin_user, flavor, a100):
    """A training template that runs on H100 80GB or A100 80GB, both nvidia.com/gpu."""
    return services.template_create(user=admin_user, slug="either", name="Either", kind="training",
                                    flavors=[flavor, a100], image="pytorch/pytorch:2.5", command=["python", "t.py"])


def test_a_flavor_whose_node_labels_another_flavor_of_its_resource_also_carries_is_refused(admin_user, flavor):
    # The H100's nodes carry gpu-portal.io/flavor=h100-80gb; a flavor selecting nodes by a subset
    # of those labels (here none at all) could take a launch meant for the other.
    lookalike = Flavor(name="Any GPU", slug="any-gpu", resource_name="nvidia.com/gpu", gpu_model="any", capacity_units=4,
                       node_labels={})
    with pytest.raises(DomainError, match="node labels of one are all among the other's") as refused:
        tenant_services.flavor_save(actor=admin_user, flavor=lookalike)
    assert refused.value.field == "node_labels"
    assert not Flavor.objects.filter(slug="any-gpu").exists()

    apart = Flavor(name="L40S", slug="l40s", resource_name="nvidia.com/gpu", gpu_model="L40S", capacity_units=4,
                   node_labels={"gpu-portal.io/flavor": "l40s"})
    assert tenant_services.flavor_save(actor=admin_user, flavor=apart).pk


def test_nothing_launches_on_a_flavor_without_a_rate_and_a_price_of_nothing_is_a_decision(
        ready_team, member, training, flavor, finance_user, simulated):
    from billing.models import Rate

    Rate.objects.filter(flavor=flavor).delete()
    with pytest.raises(DomainError, match="H100 80GB has no price on the rate card yet") as refused:
        launch(member, ready_team, training, flavor)
    assert refused.value.field == "team" and not Workload.objects.exists()

    billing_services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="0", effective_from=timezone.now())
    assert launch(member, ready_team, training, flavor).pk


def test_the_api_names_the_rate_card_when_it_refuses_an_unpriced_flavor(ready_team, member, training, flavor, simulated):
    from billing.models import Rate

    Rate.objects.filter(flavor=flavor).delete()
    response = api(member).post("/api/workloads/", {"team": ready_team.slug, "template": training.pk,
                                                    "flavor": flavor.slug}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["team"] == [(
        "H100 80GB has no price on the rate card yet, so its GPU-hours could not be billed: nothing launches on it "
        "until finance sets a rate.")]


@pytest.mark.parametrize("other, message", [
    ("mig", re.escape("asks for 1 nvidia.com/mig-1g.10gb, and one of H100 80GB for 1 nvidia.com/gpu; a launch may accept "
                      "several flavors only where a unit asks for the same")),
    ("not-allowed", "Either cannot run on L40S; leave it out."),
])
def test_a_launch_accepts_other_flavors_only_of_its_resource_and_its_template(
        ready_team, member, either, flavor, mig_flavor, admin_user, simulated, other, message):
    outsider = FlavorFactory(name="L40S", slug="l40s", node_labels={"gpu-portal.io/flavor": "l40s"})
    services.template_revise(user=admin_user, template=either, flavors=[*either.current.flavors.all(), mig_flavor])
    extra = mig_flavor if other == "mig" else outsider
    with pytest.raises(DomainError, match=message) as refused:
        launch(member, ready_team, either, flavor, also_accept=(extra,))
    assert refused.value.field == "also_accept" and not Workload.objects.exists()


def test_a_launch_accepting_either_flavor_is_admitted_on_the_one_with_room_and_billed_as_it(
        team, member, either, flavor, a100, simulated, django_capture_on_commit_callbacks):
    # The team holds A100 quota only and may not borrow: accepting either flavor, Kueue admits it on A100.
    make_ready(team, a100, units=2, may_borrow=False)
    ensure_priced(flavor)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, team, either, flavor, also_accept=(a100,))
    assert set(workload.accepted_flavors.all()) == {flavor, a100}

    simulated.advance(5)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING and workload.flavor == a100
    (interval,) = RunInterval.objects.filter(workload=workload)
    assert interval.flavor == a100 and not interval.borrowed

    body = api(member).get(f"/api/workloads/{workload.pk}/").json()
    assert (body["flavor"], body["accepted_flavors"], body["on_borrowed"]) == ("a100-80gb", ["a100-80gb", "h100-80gb"], False)
    page = api(member).get(f"/workloads/{workload.pk}/").content.decode()
    assert "Launched to run on any of A100 80GB, H100 80GB: Kueue admitted it on A100 80GB." in page

    again = services.workload_relaunch(user=member, workload=workload)
    assert set(again.accepted_flavors.all()) == {flavor, a100}


def test_a_launch_on_one_flavor_waits_rather_than_run_on_another_with_room(
        team, member, either, flavor, a100, simulated, django_capture_on_commit_callbacks):
    # One H100 unit, taken; two A100 units free: a second H100 launch waits for the H100.
    make_ready(team, a100, units=2, may_borrow=False)
    make_ready(team, flavor, units=1, may_borrow=False)
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, team, either, flavor)
        second = launch(member, team, either, flavor)
    simulated.advance(5)
    sync.sync_all()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.phase, second.phase) == (Workload.Phase.RUNNING, Workload.Phase.QUEUED)
    assert second.flavor == flavor and not RunInterval.objects.filter(workload=second).exists()
    assert {i.flavor for i in RunInterval.objects.filter(workload=first)} == {flavor}


def test_the_launch_form_offers_the_flavors_of_one_resource_and_the_hint_names_the_one_with_room(
        team, member, either, flavor, a100, simulated):
    make_ready(team, a100, units=2, may_borrow=False)
    ensure_priced(flavor)
    client = api(member)
    form = client.get(f"/launch/?team={team.slug}&template={either.pk}").content.decode()
    assert 'name="also_accept" value="a100-80gb"' in form and 'name="also_accept" value="h100-80gb"' in form

    query = f"team={team.slug}&template={either.pk}&flavor=h100-80gb&also_accept=a100-80gb&units=1"
    hint = client.get(f"/launch/hint/?{query}").content.decode()
    assert "Would run on <strong>A100 80GB</strong>" in hint and "Fits your guarantee" in hint
    alone = client.get(f"/launch/hint/?team={team.slug}&template={either.pk}&flavor=h100-80gb&units=1").content.decode()
    assert "Would run on" not in alone and "Fits your guarantee" not in alone


def test_a_required_hook_nobody_filled_stops_the_start_and_fails_closed_where_asked():
    hook = hooks.Hook[pricing.LaunchGuard]("tests.unfilled", by="nobody")
    try:
        assert "tests.unfilled (filled by nobody)" in hooks.missing()
        with pytest.raises(hooks.HookMissing, match="tests.unfilled"):
            hooks.verify()
        with pytest.raises(hooks.HookMissing, match="nobody must fill it"):
            _ = hook.call
    finally:
        hooks._declared.remove(hook)
    hooks.verify()  # every hook the portal declares is filled by its installed apps


def test_a_hook_is_filled_once():
    hook = hooks.Hook[pricing.LaunchGuard]("tests.once", by="tests")
    try:
        hook.fill(lambda team, flavors: None)
        with pytest.raises(hooks.HookMissing, match="filled twice"):
            hook.fill(lambda team, flavors: "no")
    finally:
        hooks._declared.remove(hook)


def test_a_workload_keeps_its_borrowed_history_after_it_stops(team, member, either, flavor, as_user):
    from jobs.models import RunIntervalSwitch
    from tests.billing.metering_helpers import make_interval

    workload = Workload.objects.create(team=team, owner=member, template_version=either.current, name="w", flavor=flavor,
                                       units=2, cpu=1, memory_gib=1, priority="normal", phase=Workload.Phase.SUCCEEDED)
    start = timezone.now().replace(microsecond=0) - dt.timedelta(hours=3)
    interval = make_interval(workload, start, start + dt.timedelta(hours=2))  # 2 GPUs for 2 h: 4 GPU-hours
    RunIntervalSwitch.objects.create(interval=interval, at=start + dt.timedelta(minutes=30), borrowed=True)
    RunIntervalSwitch.objects.create(interval=interval, at=start + dt.timedelta(minutes=75), borrowed=False)

    page = as_user(member).get(f"/workloads/{workload.pk}/").content.decode()
    assert 'data-testid="borrowed-history">1.50 of its 4.00 GPU-hours ran on other teams' in page
    body = as_user(member).get(f"/api/workloads/{workload.pk}/").json()
    (row,) = body["intervals"]
    assert (row["flavor"], row["fraction_numerator"], row["fraction_denominator"], row["borrowed"]) == (
        "h100-80gb", 1, 1, False)
    assert [s["borrowed"] for s in row["switches"]] == [True, False]
