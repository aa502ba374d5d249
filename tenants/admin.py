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
from django.http import HttpRequest, HttpResponse

from portal.adapters import signed_in_user
from portal.errors import DomainError
from tenants import services
from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, QuotaRequestLine, Team


class PlatformAdminOnly:
    """Model permissions follow the portal's rules: platform admins manage the catalog and teams."""

    manage_perm = "tenants.manage_teams"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # No service deletes these; retire a flavor with is_active instead.
        return False


class RefusalAsFormError(admin.ModelAdmin):
    """Shows a DomainError raised while saving as an error on the same form, what was typed kept.

    The admin saves inside one transaction, so the error leaving it rolls everything back; the
    same request is then shown again with the refusal added to the form (on its field when the
    form has one), so Django shows it as any invalid form and saves nothing, rather than a success
    message for a save that did not happen.
    """

    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except DomainError as error:
            if request.method != "POST":
                raise
            request.service_refusal = error  # type: ignore[attr-defined]
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> type[ModelForm]:
        form = super().get_form(request, obj, change, **kwargs)
        refusal: DomainError | None = getattr(request, "service_refusal", None)
        if refusal is None:
            return form
        field, message = refusal.field, refusal.message

        class Refused(form):  # type: ignore[valid-type, misc]
            def clean(self) -> dict[str, Any]:
                cleaned: dict[str, Any] = super().clean()
                self.add_error(field if field in self.fields else None, message)
                return cleaned

        return Refused


@admin.register(Flavor)
class FlavorAdmin(PlatformAdminOnly, RefusalAsFormError):
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


@admin.register(Team)
class TeamAdmin(PlatformAdminOnly, RefusalAsFormError):
    list_display = ("name", "slug", "cost_center", "sync_state_display", "created_at")
    search_fields = ("name", "slug", "cost_center")
    inlines = (MembershipInline,)
    # These go through a service (team_create / team_update); the sync fields are shown, not edited.
    editable_fields = ("slug", "name", "cost_center", "description")
    policy_fields = services.POLICY_FIELDS
    sync_fields = ("config_version", "applied_version", "synced_at", "sync_error")

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


class QuotaRequestLineInline(admin.TabularInline):
    model = QuotaRequestLine
    fields = ("flavor", "units")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm("tenants.manage_teams")


class ReadOnlyAdmin(PlatformAdminOnly, admin.ModelAdmin):
    """Requests and grants change only through their lifecycle (the pages, the API, expiry)."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "team", "requester", "status", "created_at", "decided_by", "decided_at")
    list_filter = ("status", "team")
    search_fields = ("team__slug", "requester__username", "justification")
    list_select_related = ("team", "requester", "decided_by")
    inlines = (QuotaRequestLineInline,)
    date_hierarchy = "created_at"


@admin.register(QuotaGrant)
class QuotaGrantAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "team", "flavor", "units", "valid_from", "valid_until", "ended_at")
    list_filter = ("flavor", "team")
    search_fields = ("team__slug", "flavor__name")
    list_select_related = ("team", "flavor")
