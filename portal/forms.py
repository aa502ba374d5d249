from __future__ import annotations

from django import forms
from django.conf import settings


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “training-cli on my laptop”.")
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=settings.API_TOKEN_MAX_DAYS, initial=90, label="Expires in (days)"
    )
