"""The shared kit's small pieces, each asked directly: the admin's permissions and refusals,
a refusal shown on a form, the permission guard of a view and the redirect after a change."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms
from django.contrib import admin
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import DisallowedRedirect, PermissionDenied
from django.urls import reverse

from jobs.models import Workload
from portal.adapters import add_refusal, require_perm
from portal.admin_kit import PermissionAdmin, ReadOnlyAdmin
from portal.errors import DomainError
from portal.htmx import redirect_page
from tenants import services as tenant_services
from tenants.models import Flavor, QuotaGrant, Team
from tests.conftest import login
from tests.factories import UserFactory


class NameForm(forms.Form):
    name = forms.CharField()


def _refused_form(refusal: DomainError) -> NameForm:
    form = NameForm({"name": "x"})
    assert form.is_valid()
    add_refusal(form, refusal)
    return form


def test_a_refusal_naming_a_field_of_the_form_is_shown_next_to_it():
    form = _refused_form(DomainError("Too long.", field="name"))

    assert form.errors == {"name": ["Too long."]} and "name" not in form.cleaned_data


@pytest.mark.parametrize("field", [None, "team", "__all__", "name "])
def test_a_refusal_naming_no_field_or_one_the_form_does_not_show_is_shown_above_the_fields(field):
    form = _refused_form(DomainError("No.", field=field))

    assert form.non_field_errors() == ["No."] and form.cleaned_data == {"name": "x"}


def test_a_refusal_is_shown_as_text_never_as_markup():
    form = _refused_form(DomainError("<script>alert(1)</script>", field="name"))

    assert "<script>" not in str(form["name"].errors) and "&lt;script&gt;" in str(form["name"].errors)


def test_the_permission_guard_lets_a_holder_through_and_refuses_others_with_the_reason_given(team, lead, member):
    require_perm(lead, "tenants.manage_members", team)

    with pytest.raises(PermissionDenied) as refused:
        require_perm(member, "tenants.manage_members", team, refusal="Only the team's leads manage members.")
    assert str(refused.value) == "Only the team's leads manage members."
    with pytest.raises(PermissionDenied) as bare:
        require_perm(member, "tenants.manage_members", team)
    assert str(bare.value) == ""


def test_the_permission_guard_refuses_an_anonymous_user_and_a_lead_of_another_team(team, outsider):
    for user in (AnonymousUser(), outsider):
        with pytest.raises(PermissionDenied):
            require_perm(user, "tenants.manage_members", team)


def _may(model_admin: Any, rf: Any, user: Any) -> dict[str, bool]:
    request = rf.get("/admin/")
    request.user = user
    return {"module": model_admin.has_module_permission(request), "view": model_admin.has_view_permission(request),
            "add": model_admin.has_add_permission(request), "change": model_admin.has_change_permission(request),
            "delete": model_admin.has_delete_permission(request)}


def test_the_admin_follows_the_permission_it_names_and_deletes_nothing(rf, admin_user, finance_user, lead):
    flavors = admin.site._registry[Flavor]
    assert isinstance(flavors, PermissionAdmin) and flavors.manage_perm == "tenants.manage_flavors"

    assert _may(flavors, rf, admin_user) == {"module": True, "view": True, "add": True, "change": True, "delete": False}
    nothing = dict.fromkeys(("module", "view", "add", "change", "delete"), False)
    assert _may(flavors, rf, finance_user) == nothing and _may(flavors, rf, lead) == nothing
    staff = UserFactory(username="staff-only", is_staff=True, is_superuser=False)
    assert _may(flavors, rf, staff) == nothing  # staff status alone opens no model


@pytest.mark.parametrize("model", [QuotaGrant, Workload])
def test_a_read_only_admin_is_shown_to_platform_admins_and_changed_by_nobody(rf, admin_user, finance_user, model):
    read_only = admin.site._registry[model]
    assert isinstance(read_only, ReadOnlyAdmin)

    assert _may(read_only, rf, admin_user) == {"module": True, "view": True, "add": False, "change": False, "delete": False}
    assert not any(_may(read_only, rf, finance_user).values())


def test_a_refusal_while_saving_in_the_admin_is_an_error_on_the_form_and_nothing_is_saved(admin_user, team, monkeypatch):
    def refuse(**kwargs: Any) -> None:
        raise DomainError("<b>Cost centers are closed</b> this month.", field="cost_center")

    monkeypatch.setattr(tenant_services, "team_update", refuse)
    data = {"name": "Renamed", "cost_center": "cc-1", "description": "", "may_borrow": "on", "lends_idle": "on",
            "fair_share_weight": "1", "cpu_limit_cores": "64", "memory_limit_gib": "512", "pod_limit": "100",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}

    response = login(admin_user).post(reverse("admin:tenants_team_change", args=[team.pk]), data)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["cost_center"] == ["<b>Cost centers are closed</b> this month."]
    assert "&lt;b&gt;Cost centers are closed&lt;/b&gt;" in response.content.decode()
    assert Team.objects.get(pk=team.pk).name == "Vision"


def test_after_a_change_htmx_loads_the_next_page_whole_and_a_form_post_is_redirected_there(rf):
    htmx = redirect_page(rf.post("/teams/new/", headers={"HX-Request": "true"}), "/teams/vision/")
    plain = redirect_page(rf.post("/teams/new/"), "/teams/vision/")

    assert (htmx.status_code, htmx["HX-Redirect"], htmx.content, "Location" in htmx) == (200, "/teams/vision/", b"", False)
    assert (plain.status_code, plain["Location"], "HX-Redirect" in plain) == (302, "/teams/vision/", False)


@pytest.mark.parametrize("hx", [{"HX-Request": "true"}, {}])
@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>"])
def test_no_redirect_after_a_change_leads_to_a_script(rf, hx, url):
    with pytest.raises(DisallowedRedirect):
        redirect_page(rf.post("/teams/new/", headers=hx), url)
