from __future__ import annotations

from django.contrib import admin, messages
from django.forms import ModelForm
from django.http import HttpRequest

from billing import services
from billing.models import Rate
from portal.adapters import signed_in_user
from portal.errors import DomainError


@admin.register(Rate)
class RateAdmin(admin.ModelAdmin):
    list_display = ("flavor", "price_per_gpu_hour", "currency", "effective_from", "created_by")
    list_filter = ("flavor",)
    fields = ("flavor", "price_per_gpu_hour", "currency", "effective_from", "note")

    def has_change_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return False  # a new price is a new rate; history stays as it was

    def has_delete_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("billing.set_rates")

    def has_view_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return request.user.has_perm("portal.read_costs")

    def save_model(self, request: HttpRequest, obj: Rate, form: ModelForm, change: bool) -> None:
        try:
            rate = services.rate_set(actor=signed_in_user(request), flavor=obj.flavor, price_per_gpu_hour=obj.price_per_gpu_hour,
                                     currency=obj.currency, effective_from=obj.effective_from, note=obj.note)
        except DomainError as error:
            messages.error(request, error.message)
            return
        obj.pk = rate.pk
