"""The budget pages' forms: a team's monthly budget (asked again when a hard stop would hold the
team at once) and each person's choice of budget alert emails."""

from __future__ import annotations

from django import forms


class BudgetForm(forms.Form):
    amount = forms.CharField(max_length=40, help_text="A month's budget, e.g. 10000 or 12500.50.")
    currency = forms.CharField(max_length=3, initial="USD")
    hard_stop = forms.BooleanField(required=False, help_text="At 100 % refuse new launches and hold the team's queue.")
    # A hard stop below what the team already spent holds it at once: the page asks first.
    hold_confirmed = forms.BooleanField(required=False)


class AlertEmailForm(forms.Form):
    daily_digest = forms.BooleanField(required=False)
