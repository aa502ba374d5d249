"""The Django admin kit every app's admin.py shares.

The admin is one more adapter: who may see or change a model is a `rules` permission, as on the
pages and the API, and every write goes through a service, whose refusal is shown as an error on
the form, what was typed kept, and nothing saved. Nothing here knows another app's models; each
admin names the permission that guards it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.db.models import Model
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse

from portal.adapters import add_refusal
from portal.errors import DomainError


class PermissionAdmin:
    """Model permissions follow the portal's rules: holders of `manage_perm` see, add and change;
    nobody deletes (no service deletes these; a flavor is retired with is_active instead)."""

    manage_perm: ClassVar[str]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(self.manage_perm)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class ReadOnlyAdmin(PermissionAdmin):
    """Shown to holders of `manage_perm`, changed by nobody here: the object changes only through
    its lifecycle (the pages, the API, a service). For a ModelAdmin and an inline alike."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
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
        shown = refusal

        class Refused(form):  # type: ignore[valid-type, misc]
            def clean(self) -> dict[str, Any]:
                cleaned: dict[str, Any] = super().clean()
                add_refusal(self, shown)
                return cleaned

        return Refused
