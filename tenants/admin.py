"""Django admin for the platform admin: flavors, teams and their members, requests and grants.

Every write goes through a service, so the admin writes the same audit events, checks the same
rules and queues the same cluster work as the pages and the API. A service's refusal is shown
as an error on the form, what was typed kept, and nothing is saved.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest

from portal.adapters import signed_in_user
from portal.admin_kit import PermissionAdmin, ReadOnlyAdmin, RefusalAsFormError
from portal.errors import DomainError
from tenants import services
from tenants.forms import StorageQuotaField, TeamForm, WeightField
from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, QuotaRequestLine, Team


@admin.register(Flavor)
class FlavorAdmin(PermissionAdmin, RefusalAsFormError):
    manage_perm = "tenants.manage_flavors"
    list_display = ("name", "slug", "resource_name", "sharing_mode", "fraction_display", "capacity_units", "is_active")
    list_filter = ("sharing_mode", "is_active")
    search_fields = ("name", "slug", "resource_name", "gpu_model")

    def save_model(self, request: HttpRequest, obj: Flavor, form: ModelForm, change: bool) -> None:
        services.flavor_save(actor=signed_in_user(request), flavor=obj)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    raw_id_fields = ("user",)
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return obj is not None and request.user.has_perm("tenants.manage_members", obj)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return obj is not None and request.user.has_perm("tenants.manage_members", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return obj is not None and request.user.has_perm("tenants.manage_members", obj)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm("tenants.manage_teams")


class TeamAdminForm(ModelForm):
    storage_quota = StorageQuotaField(required=False, help_text=TeamForm.base_fields["storage_quota"].help_text)


@admin.register(Team)
class TeamAdmin(PermissionAdmin, RefusalAsFormError):
    manage_perm = "tenants.manage_teams"
    form = TeamAdminForm
    list_display = ("name", "slug", "cost_center", "sync_state_display", "created_at")
    search_fields = ("name", "slug", "cost_center")
    inlines = (MembershipInline,)
    # These go through a service (team_create / team_update); the sync fields are shown, not edited.
    editable_fields = ("slug", "name", "cost_center", "description")
    policy_fields = services.POLICY_FIELDS
    sync_fields = ("config_version", "applied_version", "synced_at", "sync_error")

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # The weight is read as the team's pages and the API read it (services.fair_share_weight_input);
        # only the change form has it, with the other sharing policy.
        if db_field.name == "fair_share_weight":
            return db_field.formfield(form_class=WeightField, **kwargs)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Team | None = None) -> tuple[str, ...]:
        if obj is None:
            return self.editable_fields
        return self.editable_fields + self.policy_fields + self.sync_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Team | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("slug",) + self.sync_fields

    def get_inlines(self, request: HttpRequest, obj: Team | None) -> tuple[type[MembershipInline], ...]:
        return self.inlines if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Team, form: ModelForm, change: bool) -> None:
        data = {field: form.cleaned_data[field] for field in ("name", "cost_center", "description")}
        if change:
            data |= {field: form.cleaned_data[field] for field in self.policy_fields}
            # The form has already copied the new values onto obj; the service compares against the stored team.
            services.team_update(actor=signed_in_user(request), team=Team.objects.get(pk=obj.pk), **data)
        else:
            obj.pk = services.team_create(actor=signed_in_user(request), slug=form.cleaned_data["slug"], **data).pk
        obj.refresh_from_db()

    def save_formset(self, request: HttpRequest, form: ModelForm, formset: BaseInlineFormSet, change: bool) -> None:
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        team: Team = form.instance
        formset.save(commit=False)
        actor = signed_in_user(request)
        for membership in formset.deleted_objects:
            services.membership_remove(actor=actor, membership=membership)
        for membership, changed in formset.changed_objects:
            if "user" in changed:
                raise DomainError("To put someone else in a member's place, remove the member and add the other person.")
            if "role" in changed:
                services.membership_set_role(actor=actor, membership=membership, role=membership.role)
        for membership in formset.new_objects:
            services.membership_add(actor=actor, team=team, user=membership.user, role=membership.role)


class QuotaRequestLineInline(ReadOnlyAdmin, admin.TabularInline):
    manage_perm = "tenants.manage_teams"
    model = QuotaRequestLine
    fields = ("flavor", "units", "endorsed_units", "approved_units")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    """Requests and grants change only through their lifecycle (the pages, the API, expiry)."""

    manage_perm = "tenants.manage_teams"
    list_display = ("__str__", "team", "requester", "status", "created_at", "decided_by", "decided_at")
    list_filter = ("status", "team")
    search_fields = ("team__slug", "requester__username", "justification")
    list_select_related = ("team", "requester", "decided_by")
    inlines = (QuotaRequestLineInline,)
    date_hierarchy = "created_at"


@admin.register(QuotaGrant)
class QuotaGrantAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    manage_perm = "tenants.manage_teams"
    list_display = ("__str__", "team", "flavor", "units", "valid_from", "valid_until", "ended_at")
    list_filter = ("flavor", "team")
    search_fields = ("team__slug", "flavor__name")
    list_select_related = ("team", "flavor")
