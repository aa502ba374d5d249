"""Django admin for finance and platform admins: the rate card.

A price is set through billing.rates.services.rate_set, as the rate card page and the API set it: the same
reading of the price (billing.money.money_input), the same rules and the same audit event; a
refusal is an error on the form and nothing is saved.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from billing.models import Rate
from billing.money import money_input
from billing.rates import services
from portal.adapters import signed_in_user
from portal.admin_kit import RefusalAsFormError
from portal.errors import DomainError


class RateForm(forms.ModelForm):
    # Text, read as the page and the API read it: a model DecimalField would take "１２" as 12.
    price_per_gpu_hour = forms.CharField(max_length=40, label="Price per GPU-hour", help_text="e.g. 2.75")
    # Read by the rate service, which refuses a bad one in words on this field.
    borrowed_discount_percent = forms.CharField(max_length=20, required=False, label="Borrowed hours: percent off",
                                                help_text="For hours run on quota borrowed from other teams. Empty: none.")

    class Meta:
        model = Rate
        fields = ("flavor", "price_per_gpu_hour", "currency", "borrowed_discount_percent", "effective_from", "note")

    def clean_price_per_gpu_hour(self) -> Decimal:
        try:
            return money_input(self.cleaned_data["price_per_gpu_hour"], column=Rate._meta.get_field("price_per_gpu_hour"),
                               field="price_per_gpu_hour", noun="price", unit=" per GPU-hour", example="2.75")
        except DomainError as error:
            raise forms.ValidationError(error.message) from None


@admin.register(Rate)
class RateAdmin(RefusalAsFormError):
    form = RateForm
    list_display = ("flavor", "price_per_gpu_hour", "currency", "effective_from", "created_by")
    list_filter = ("flavor",)
    fields = ("flavor", "price_per_gpu_hour", "currency", "borrowed_discount_percent", "effective_from", "note")

    def has_change_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return False  # a new price is a new rate; history stays as it was

    def has_delete_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("billing.set_rates")

    def has_view_permission(self, request: HttpRequest, obj: Rate | None = None) -> bool:
        return request.user.has_perm("portal.read_costs")

    def save_model(self, request: HttpRequest, obj: Rate, form: forms.ModelForm, change: bool) -> None:
        rate = services.rate_set(actor=signed_in_user(request), flavor=obj.flavor, price_per_gpu_hour=obj.price_per_gpu_hour,
                                 currency=obj.currency, effective_from=obj.effective_from, note=obj.note,
                                 borrowed_discount_percent=obj.borrowed_discount_percent)
        obj.pk, obj.currency, obj.created_by, obj.created_at = rate.pk, rate.currency, rate.created_by, rate.created_at
