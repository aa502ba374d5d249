"""The statement pages' forms: closing a month (asked twice: the preview, then for good) and an
adjustment, whose amount the service reads."""

from __future__ import annotations

import datetime as dt

from django import forms

from billing import periods


class CloseMonthForm(forms.Form):
    month = forms.CharField(max_length=7, help_text="YYYY-MM")
    # Closing is for good: the first POST shows what the statement would hold, the second closes.
    confirmed = forms.BooleanField(required=False)

    def clean_month(self) -> dt.date:
        text = self.cleaned_data["month"].strip()
        month = periods.month_parse(text)
        if month is None:
            raise forms.ValidationError(f"“{text}” is not a month; write it as YYYY-MM, for example 2026-10.")
        return month


class AdjustmentForm(forms.Form):
    team = forms.CharField(max_length=63)
    # Text, not a DecimalField: the service says in words what is wrong with an amount.
    amount = forms.CharField(max_length=64)
    reason = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
