"""The rate card page's form: a new price for a flavor, read by `billing.rates.services.rate_set`."""

from __future__ import annotations

from django import forms

from tenants.models import Flavor


class RateForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.order_by("name"), to_field_name="slug",
                                    error_messages={"invalid_choice": "Choose one of the flavors listed."})
    # Text, not a DecimalField: the service says in words what is wrong with a price.
    price_per_gpu_hour = forms.CharField(max_length=20, label="Price per GPU-hour",
                                         help_text="Per unit-hour on a CPU-only flavor (its cores and memory).")
    currency = forms.CharField(max_length=3, initial="USD")
    effective_from = forms.DateTimeField(required=False, label="From (empty: now)",
                                         error_messages={"invalid": "Write the moment as YYYY-MM-DD HH:MM."})
    borrowed_discount_percent = forms.CharField(
        max_length=20, required=False, label="Borrowed hours: percent off",
        help_text="For hours run on quota borrowed from other teams, which a lender's reclaim may preempt. Empty: none.")
    note = forms.CharField(max_length=200, required=False)
