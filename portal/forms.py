from __future__ import annotations

from django import forms
from django.conf import settings

from portal.adapters import WholeNumberField
from portal.models import ApiToken


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “training-cli on my laptop”.")
    expires_in_days = WholeNumberField(
        min_value=1, max_value=settings.API_TOKEN_MAX_DAYS, initial=90, label="Expires in (days)"
    )
    scope = forms.ChoiceField(
        choices=ApiToken.Scope.choices, initial=ApiToken.Scope.WRITE, widget=forms.RadioSelect, required=False,
        help_text="A read-only token can list and watch but change nothing: enough for dashboards and reports.",
    )

    def clean_scope(self) -> str:
        # Unchosen means what the API does without a scope: a token that acts fully as its owner.
        return self.cleaned_data.get("scope") or ApiToken.Scope.WRITE
