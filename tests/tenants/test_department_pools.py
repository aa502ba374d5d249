"""A department's own pool (issue 27 §1): units of a GPU flavor it guarantees its teams together,
beyond their own guarantees. Set on the page and the API by platform admins, audited; promised
like a grant (capacity, approvals, the catalog and the capacity calendar count it); realised as the
nominal quota of the department's Cohort; refused in words where it does not fit, saving nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tenants import desired, reconcile, selectors, services
from tenants.models import Department, DepartmentPool, Flavor
from tests.conftest import login
from tests.factories import FlavorFactory, QuotaGrantFactory, QuotaRequestFactory, QuotaRequestLineFactory

pytestmark = pytest.mark.django_db
COHORT = ("kueue.x-k8s.io/v1beta2", "Cohort")


@pytest.fixture
def research(admin_user) -> Department:
    return services.department_save(actor=admin_user, department=Department(name="Research", slug="research"))


def pooled(department: Department) -> dict[str, int]:
    return dict(DepartmentPool.objects.current().filter(department=department).values_list("flavor__slug", "units"))


def test_a_pool_is_the_cohorts_nominal_quota_and_is_promised_like_a_grant(research, team, flavor, mig_flavor,
                                                                         admin_user, simulated):
    QuotaGrantFactory(team=team, flavor=flavor, units=3)
    services.department_save(actor=admin_user, department=research, pool={flavor: 4, mig_flavor: 0})
    assert pooled(research) == {flavor.slug: 4}
    event = AuditEvent.objects.filter(action="department.updated").latest("pk")
    assert event.message == f"{admin_user.username} changed department research: pool 4 × {flavor.name}"
    assert event.data == {"pool": ["none", f"4 × {flavor.name}"]}
    assert selectors.flavor_guaranteed_totals()[flavor.pk] == 7
    assert selectors.department_pool_totals() == {flavor.pk: 4}
    # The Cohort holds it as nominal quota of the flavor's resource, and nothing of the others'.
    reconcile.platform_reconcile()
    cohort = gateway().get(ObjectRef(*COHORT, research.cohort)) or {}
    entries = {(fq["name"], r["name"]): r for group in cohort["spec"]["resourceGroups"] for fq in group["flavors"]
               for r in fq["resources"]}
    assert entries[(flavor.slug, "nvidia.com/gpu")] == {"name": "nvidia.com/gpu", "nominalQuota": "4"}
    assert entries[(mig_flavor.slug, "nvidia.com/mig-1g.10gb")]["nominalQuota"] == "0"
    # Saving it unchanged writes nothing; clearing it removes the rows and the quota.
    services.department_save(actor=admin_user, department=research, pool={flavor: 4})
    assert AuditEvent.objects.filter(action="department.updated").count() == 1
    services.department_save(actor=admin_user, department=research, pool={})
    assert pooled(research) == {} and selectors.flavor_guaranteed_totals()[flavor.pk] == 3
    (spec,) = desired.department_specs()
    assert spec.pool == ()
    # What was pooled when stays, for metering: one row, ended.
    (row,) = DepartmentPool.objects.filter(department=research)
    assert row.units == 4 and row.ended_at is not None and row.ended_at > row.valid_from


def test_deleting_a_department_frees_its_pool_and_keeps_its_history(research, flavor, admin_user):
    services.department_save(actor=admin_user, department=research, pool={flavor: 4})
    services.department_save(actor=admin_user, department=research, pool={flavor: 6})
    services.department_delete(actor=admin_user, department=research)
    assert AuditEvent.objects.filter(action="department.deleted").get().message == (
        f"{admin_user.username} deleted department research; its pool of 6 × {flavor.name} is free again")
    assert selectors.department_pool_totals() == {}
    assert sorted(DepartmentPool.objects.filter(department=None).values_list("units", flat=True)) == [4, 6]
    assert not DepartmentPool.objects.current().exists()


def test_a_pool_beyond_what_capacity_holds_is_refused_and_saves_nothing(research, team, flavor, admin_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=10)  # of 16
    other = services.department_save(actor=admin_user, department=Department(name="Ops", slug="ops"), pool={flavor: 2})
    with pytest.raises(DomainError) as refused:
        services.department_save(actor=admin_user, department=research, pool={flavor: 5})
    assert refused.value.field == "pool"
    assert refused.value.message == (
        f"{flavor.name} has 16 units and teams and departments are promised up to 12 of them (reservations included); "
        "a pool of 5 would make 17, so it can be at most 4.")
    assert pooled(research) == {} and pooled(other) == {flavor.slug: 2}
    # A department's own pool does not stand in its way: 2 may become 6 (10 + 6 = 16).
    services.department_save(actor=admin_user, department=other, pool={flavor: 6})
    assert pooled(other) == {flavor.slug: 6}


def test_only_active_gpu_flavors_are_pooled(research, flavor, admin_user):
    cpu = FlavorFactory.create(name="CPU", slug="cpu", resource_name="cpu", sharing_mode=Flavor.SharingMode.CPU,
                        gpu_model="", fraction_numerator=0, memory_gib_per_unit=8, resource_per_unit=4, capacity_units=64)
    with pytest.raises(DomainError, match="CPU is CPU only, which no queue lends; a department pools active GPU"):
        services.department_save(actor=admin_user, department=research, pool={cpu: 4})
    services.department_save(actor=admin_user, department=research, pool={flavor: 2})
    Flavor.objects.filter(pk=flavor.pk).update(is_active=False)
    flavor.refresh_from_db()
    with pytest.raises(DomainError, match=f"{flavor.name} is retired"):
        services.department_save(actor=admin_user, department=research, pool={flavor: 3})
    services.department_save(actor=admin_user, department=research, pool={flavor: 1})  # lowering a retired one is fine
    assert pooled(research) == {flavor.slug: 1}


def test_a_pool_takes_room_from_approvals_the_catalog_and_the_calendar(research, team, lead, member, flavor, admin_user):
    services.department_save(actor=admin_user, department=research, pool={flavor: 10})
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    qr = QuotaRequestFactory.create(team=team, requester=member)
    QuotaRequestLineFactory(request=qr, flavor=flavor, units=4)
    with pytest.raises(DomainError) as refused:
        services.quota_request_approve(quota_request=qr, approver=lead)
    assert refused.value.message == (
        f"Cannot approve request #{qr.pk}: {flavor.name} has 16 units and teams already hold 4 and departments pool 10; "
        "+4 would make 18, so at most 2 more can be approved.")
    flavor.capacity_units = 12
    with pytest.raises(DomainError) as dropped:
        services.flavor_save(actor=admin_user, flavor=flavor)
    assert dropped.value.message == (f"{flavor.name}: teams are guaranteed 4 units and departments pool 10, so capacity "
                                     "cannot drop to 12. Lower their grants and pools first.")
    _, rows = selectors.capacity_calendar(months=3)
    (row,) = [r for r in rows if r.flavor.pk == flavor.pk]
    assert [cell.peak for cell in row.cells] == [14, 14, 14]


def test_the_page_sets_a_pool_per_flavor_lists_it_and_refuses_what_does_not_fit(research, team, flavor, admin_user):
    client = login(admin_user)
    form = {"name": "Research", "fair_share_weight": "1", f"pool_{flavor.slug}": "3"}
    page = client.get(reverse("tenants:department-edit", args=["research"])).content.decode()
    assert f'name="pool_{flavor.slug}"' in page and f"Pool of {flavor.name}" in page
    assert client.post(reverse("tenants:department-edit", args=["research"]), form).status_code == 302
    assert pooled(research) == {flavor.slug: 3}
    listed = client.get(reverse("tenants:department-list")).content.decode()
    assert f'<td data-testid="department-pool">3 × {flavor.name}</td>' in listed
    refused = client.post(reverse("tenants:department-edit", args=["research"]), {**form, f"pool_{flavor.slug}": "17"})
    assert refused.status_code == 400
    assert "a pool of 17 would make 17, so it can be at most 16." in refused.content.decode()
    bad = client.post(reverse("tenants:department-edit", args=["research"]), {**form, f"pool_{flavor.slug}": "-2"})
    assert bad.status_code == 400 and f'data-testid="error-pool_{flavor.slug}"' in bad.content.decode()
    assert pooled(research) == {flavor.slug: 3}
    # Left empty: none.
    assert client.post(reverse("tenants:department-edit", args=["research"]),
                       {**form, f"pool_{flavor.slug}": ""}).status_code == 302
    assert pooled(research) == {}


@pytest.mark.parametrize(("pool", "words"), [
    ({"nowhere": 2}, "No flavor is called “nowhere”: name flavors by their slugs."),
    ({"h100-80gb": -1}, "greater than or equal to 0"),
    ({"h100-80gb": "two"}, "whole number"),
    ({"h100-80gb": 99}, "so it can be at most 16."),
    ({"h100-80gb": 10**17}, "so it can be at most 16."),
    ({"h100-80gb": True}, "whole number"),
    (["h100-80gb"], "Expected a dictionary"),
])
def test_the_api_refuses_a_bad_pool_in_words_and_saves_nothing(research, flavor, admin_user, pool: Any, words):
    refused = login(admin_user).patch("/api/departments/research/", {"pool": pool}, content_type="application/json")
    assert refused.status_code == 400 and words in str(refused.json())
    assert "pool" in refused.json()["errors"]
    assert pooled(research) == {}


def test_the_api_shows_and_replaces_the_pool_and_leaving_it_out_keeps_it(research, flavor, mig_flavor, admin_user,
                                                                         finance_user, lead):
    client = login(admin_user)
    made = client.patch("/api/departments/research/", {"pool": {flavor.slug: 2, mig_flavor.slug: "7"}},
                        content_type="application/json")
    assert made.status_code == 200 and made.json()["pool"] == {mig_flavor.slug: 7, flavor.slug: 2}
    kept = client.patch("/api/departments/research/", {"borrowing_limit": 3}, content_type="application/json")
    assert kept.json()["pool"] == {mig_flavor.slug: 7, flavor.slug: 2}
    replaced = client.patch("/api/departments/research/", {"pool": {flavor.slug: 1}}, content_type="application/json")
    assert replaced.json()["pool"] == {flavor.slug: 1}
    created = client.post("/api/departments/", {"name": "Ops", "slug": "ops", "pool": {flavor.slug: 4}},
                          content_type="application/json")
    assert created.status_code == 201 and created.json()["pool"] == {flavor.slug: 4}
    assert [d["pool"] for d in login(finance_user).get("/api/departments/").json()["results"]] == [
        {flavor.slug: 4}, {flavor.slug: 1}]
    assert login(lead).patch("/api/departments/research/", {"pool": {}},
                             content_type="application/json").status_code in (403, 404)
    assert pooled(research) == {flavor.slug: 1}
