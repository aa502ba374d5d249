"""Django admin for platform admins: templates with their versions, and workloads, read-only.

Templates change through services.template_revise (a new version each time) and workloads through
the launch and stop services, so nothing here writes.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from jobs import policy, reclaim, services
from jobs.models import IdleDefaults, ImageRegistry, Workload, WorkloadTemplate, WorkloadTemplateVersion
from portal.admin_kit import PermissionAdmin, ReadOnlyAdmin, RefusalAsFormError


class VersionInline(ReadOnlyAdmin, admin.TabularInline):
    manage_perm = "tenants.manage_teams"
    model = WorkloadTemplateVersion
    extra = 0
    fields = ("number", "image", "default_units", "max_units", "default_priority", "allowed_priorities", "parameters",
              "created_by", "created_at")
    readonly_fields = fields
    ordering = ("-number",)


@admin.register(WorkloadTemplate)
class WorkloadTemplateAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    """Shown to those who manage the teams (platform admins), like the team pages of the admin."""

    manage_perm = "tenants.manage_teams"
    list_display = ("name", "slug", "kind", "is_global", "owner_team", "is_active", "created_at")
    list_filter = ("kind", "is_global", "is_active")
    search_fields = ("name", "slug")
    inlines = (VersionInline,)


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin, admin.ModelAdmin):
    manage_perm = "tenants.manage_teams"
    list_display = ("id", "name", "team", "owner", "phase", "flavor", "units", "workers", "on_borrowed", "created_at")
    list_filter = ("phase", "team", "flavor", "on_borrowed")
    search_fields = ("name", "owner__username", "team__slug")
    list_select_related = ("team", "owner", "flavor")
    date_hierarchy = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workload]:
        return super().get_queryset(request).select_related("team", "owner", "flavor", "template_version__template")


class ImageRegistryForm(forms.ModelForm):
    class Meta:
        model = ImageRegistry
        fields = ("prefix", "note")

    def clean_prefix(self) -> str:
        entry = policy.registry_entry(self.cleaned_data["prefix"])
        if entry is None:
            raise forms.ValidationError("Write a registry host, optionally with a path, e.g. nvcr.io/nvidia.")
        return entry


@admin.register(ImageRegistry)
class ImageRegistryAdmin(PermissionAdmin, RefusalAsFormError):
    """The image allow-list: platform admins add and remove entries through the services, which
    check the permission and write the audit trail."""

    manage_perm = "jobs.manage_image_registries"
    form = ImageRegistryForm
    list_display = ("prefix", "note", "created_by", "created_at")
    search_fields = ("prefix", "note")

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # remove an entry and add another: each change is one audited step

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.has_module_permission(request)

    def save_model(self, request: HttpRequest, obj: ImageRegistry, form: forms.ModelForm, change: bool) -> None:
        saved = services.image_registry_add(user=request.user, prefix=obj.prefix, note=obj.note)  # type: ignore[arg-type]
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: ImageRegistry) -> None:
        services.image_registry_remove(user=request.user, registry=obj)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ImageRegistry]) -> None:
        for registry in queryset:
            self.delete_model(request, registry)


@admin.register(IdleDefaults)
class IdleDefaultsAdmin(PermissionAdmin, RefusalAsFormError):
    """The platform's idle policy (one row): saved through reclaim.idle_defaults_set, audited."""

    manage_perm = "tenants.manage_teams"

    fields = reclaim.IDLE_DEFAULT_FIELDS
    list_display = ("threshold_percent", "window_minutes", "action", "grace_minutes", "updated_by", "updated_at")

    def has_add_permission(self, request: HttpRequest, *args: object) -> bool:
        return super().has_add_permission(request) and not IdleDefaults.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: IdleDefaults, form: forms.ModelForm, change: bool) -> None:
        saved = reclaim.idle_defaults_set(user=request.user,  # type: ignore[arg-type]
                                          **{name: getattr(obj, name) for name in reclaim.IDLE_DEFAULT_FIELDS})
        obj.pk = saved.pk
