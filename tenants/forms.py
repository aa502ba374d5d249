"""Forms for the team and quota pages. They parse input; the rules live in the services."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q
from django.http import QueryDict

from portal.adapters import WholeNumberField
from portal.errors import DomainError
from portal.models import User
from tenants import selectors, services
from tenants.models import WEIGHT_LIMIT, Department, Flavor, Membership, QuotaRequest, Team


class MembershipAddForm(forms.Form):
    username = forms.CharField(max_length=150, widget=forms.TextInput(attrs={"placeholder": "username", "autocomplete": "off"}))
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class MembershipRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class DecisionForm(forms.Form):
    note = forms.CharField(required=False, max_length=2000)


@dataclass(frozen=True)
class LineRow:
    """One line of the request form as the user typed it, so a refused form shows it again."""

    index: int
    flavor: str
    units: str

    @property
    def is_blank(self) -> bool:
        return not self.flavor and not self.units


class QuotaRequestForm(forms.Form):
    """A quota request: the team, up to MAX_LINES (flavor, units) lines, a reason and an end date.

    The lines are repeated `flavor` and `units` inputs rather than a formset, so the live
    preview of one line sends exactly `team`, `flavor` and `units`.
    """

    MAX_LINES = 5

    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", empty_label="Choose a team…")
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What will the team run, and why now?"}),
        help_text="Your team lead decides on this; say what it is for.",
    )
    starts_on = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        label="Start date (optional)",
        help_text="Reserve the quota for a later window (a deadline next month): checked against what is already "
                  "promised for every day of it, and applied on its first day. Leave empty for quota from approval.",
    )
    ends_on = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        label="End date (optional)",
        help_text="Last day of temporary quota. Leave empty for permanent quota.",
    )
    renews = forms.ModelChoiceField(queryset=QuotaRequest.objects.none(), required=False, widget=forms.HiddenInput,
                                    error_messages={"invalid_choice": "The request to renew is not one you can see."})

    def __init__(self, data: QueryDict | None = None, *, user: User | AnonymousUser, initial_team: str | None = None,
                 renewal_of: QuotaRequest | None = None) -> None:
        super().__init__(data)
        renews_field: forms.ModelChoiceField = self.fields["renews"]  # type: ignore[assignment]
        renews_field.queryset = QuotaRequest.objects.for_user(user)
        self.flavors = {flavor.slug: flavor for flavor in Flavor.objects.filter(is_active=True).order_by("name")}
        allowed = [team.pk for team in Team.objects.for_user(user) if user.has_perm("tenants.request_quota", team)]
        team_field: forms.ModelChoiceField = self.fields["team"]  # type: ignore[assignment]
        team_field.queryset = Team.objects.filter(pk__in=allowed).order_by("name")
        self.team_count = len(allowed)
        if initial_team:
            self.initial["team"] = initial_team
        elif len(allowed) == 1:
            self.initial["team"] = team_field.queryset.first()
        self.line_rows = self._line_rows(data)
        self.renewal_of = renewal_of
        if renewal_of is not None and data is None:
            self._prefill_renewal(renewal_of)

    def _prefill_renewal(self, renewed: QuotaRequest) -> None:
        """The same lines as the grants still running, and a new end date as far past the old one
        as the old one was past its approval."""
        units: dict[str, int] = {}
        for grant in selectors.renewable_grants(quota_request=renewed):
            units[grant.flavor.slug] = units.get(grant.flavor.slug, 0) + grant.units
        rows = list(units.items())[: self.MAX_LINES]
        self.line_rows = [
            LineRow(index=i, flavor=rows[i][0] if i < len(rows) else "", units=str(rows[i][1]) if i < len(rows) else "")
            for i in range(self.MAX_LINES)
        ]
        self.initial.update(team=renewed.team.slug, renews=renewed.pk,
                            justification=f"Renewal of request #{renewed.pk}: {renewed.justification}")
        if renewed.ends_on is not None:
            started = (renewed.decided_at or renewed.created_at).date()
            self.initial["ends_on"] = renewed.ends_on + max(renewed.ends_on - started, dt.timedelta(days=1))

    def _line_rows(self, data: QueryDict | None) -> list[LineRow]:
        flavors = data.getlist("flavor") if data is not None else []
        units = data.getlist("units") if data is not None else []
        return [
            LineRow(
                index=i, flavor=(flavors[i] if i < len(flavors) else "").strip(),
                units=(units[i] if i < len(units) else "").strip(),
            )
            for i in range(self.MAX_LINES)
        ]

    @property
    def visible_line_count(self) -> int:
        """Lines shown open: every line the user filled in, and at least one."""
        filled = [row.index for row in self.line_rows if not row.is_blank]
        return max(filled, default=0) + 1

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        lines: list[services.LineInput] = []
        for row in self.line_rows:
            if row.is_blank:
                continue
            flavor = self.flavors.get(row.flavor)
            if flavor is None:
                self.add_error(
                    None,
                    f"Choose a flavor for the line with “{row.units}” units." if row.flavor == ""
                    else "Choose a flavor from the list.",
                )
                continue
            if not row.units:
                self.add_error(None, f"{flavor.name}: how many units? Enter a whole number, negative to give units back.")
                continue
            try:
                lines.append(services.LineInput(flavor=flavor, units=services.parse_units(row.units, flavor=flavor)))
            except DomainError as error:
                self.add_error(None, error.message)
        cleaned["lines"] = lines
        return cleaned


# --- The platform admin's pages: teams and the GPU catalog ----------------------------------------


class StorageQuotaField(forms.Field):
    """A team's storage quota as people write it: “standard: 500, fast-ssd: 100” (GiB per storage class)."""

    widget = forms.TextInput

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return ", ".join(f"{name}: {gib}" for name, gib in sorted(value.items()))
        return value

    def to_python(self, value: Any) -> dict[str, int]:
        quota: dict[str, int] = {}
        for part in str(value or "").replace("\n", ",").split(","):
            if not part.strip():
                continue
            name, colon, gib = part.partition(":")
            name, gib = name.strip(), gib.strip()
            if not colon or not gib.isascii() or not gib.isdigit():
                raise forms.ValidationError(f"Write “{part.strip()}” as a storage class and its GiB, such as “standard: 500”.")
            if name in quota:
                raise forms.ValidationError(f"The storage class {name} is named twice.")
            quota[name] = int(gib)
        return quota


class WeightField(forms.DecimalField):
    """A fair-share weight, read by services.fair_share_weight_input (ASCII digits, one sentence
    whatever is wrong with it); shown as a number input from 0 to 100."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(max_digits=5, decimal_places=2, min_value=Decimal(0), max_value=WEIGHT_LIMIT)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        if value in self.empty_values:
            return super().clean(value)  # required, as Django says it
        try:
            return services.fair_share_weight_input(value)
        except DomainError as refusal:
            raise forms.ValidationError(refusal.message, code="invalid") from None


class TeamForm(forms.ModelForm):
    """A team's name, cost center and sharing policy; the slug only when the team is new (it names
    the namespace). Parsing only: tenants.services.team_create/team_update decide and audit."""

    storage_quota = StorageQuotaField(
        required=False, label="Storage quota",
        help_text="GiB the team's data volumes may ask for, per storage class: “standard: 500, fast-ssd: 100”. "
                  "Members make volumes only of the classes named here.")

    class Meta:
        model = Team
        fields = ["slug", "name", "cost_center", "description", *services.POLICY_FIELDS]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        # ASCII digits only: Django's IntegerField reads "１２" as 12.
        field_classes = {"cpu_limit_cores": WholeNumberField, "memory_limit_gib": WholeNumberField,
                         "pod_limit": WholeNumberField, "fair_share_weight": WeightField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["slug"].disabled = True
            self.fields["slug"].help_text = "The namespace's name; it cannot change."

    def changes(self) -> dict[str, Any]:
        # GPUs per person is set on the team page's members card (a lead's), not here.
        return {name: self.cleaned_data[name] for name in (*services.TEAM_FIELDS, *services.POLICY_FIELDS)
                if name in self.fields}


class DepartmentForm(forms.ModelForm):
    """A department's name, limits and heads; its slug only when new (it names the cohort).
    Parsing only: tenants.services.department_save decides and audits."""

    heads = forms.CharField(
        required=False, label="Heads",
        help_text="Usernames, separated by commas: they decide its teams' quota requests above the leads.")

    class Meta:
        model = Department
        fields = ["name", "slug", "borrowing_limit", "lending_limit", "fair_share_weight", "heads", "head_approves"]
        field_classes = {"borrowing_limit": WholeNumberField, "lending_limit": WholeNumberField,
                         "fair_share_weight": WeightField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pooled = {}
        if self.instance.pk:
            self.fields["slug"].disabled = True
            self.fields["slug"].help_text = "It names the department's cohort; it cannot change."
            self.initial["heads"] = ", ".join(self.instance.heads.order_by("username").values_list("username", flat=True))
            pooled = {row.flavor_id: row.units for row in self.instance.pool_in_force()}
        # A field per GPU flavor it may pool, and per retired one it still pools (to lower or clear).
        self.pool_flavors = list(Flavor.objects.filter(Q(is_active=True) | Q(pk__in=list(pooled)))
                                 .exclude(sharing_mode=Flavor.SharingMode.CPU).order_by("name"))
        for flavor in self.pool_flavors:
            name = f"pool_{flavor.slug}"
            self.fields[name] = WholeNumberField(
                required=False, min_value=0, label=f"Pool of {flavor.name}",
                help_text=f"Units of {flavor.name} it guarantees its teams together, beyond their own. Empty: none.")
            self.initial[name] = pooled.get(flavor.pk)

    def pool(self) -> dict[Flavor, int]:
        """The pool the form asks for: units per flavor, 0 where left empty."""
        return {flavor: self.cleaned_data.get(f"pool_{flavor.slug}") or 0 for flavor in self.pool_flavors}

    def clean_heads(self) -> list[Any]:
        try:
            return services.department_heads_input(self.cleaned_data["heads"].split(","))
        except DomainError as refusal:
            raise forms.ValidationError(refusal.message) from None


class FlavorForm(forms.ModelForm):
    """A flavor of the catalog, prefilled from a preset when one is chosen. The slug names the
    Kueue ResourceFlavor, so it is set once."""

    class Meta:
        model = Flavor
        fields = ["name", "slug", "resource_name", "resource_per_unit", "memory_gib_per_unit", "extra_resources",
                  "device_class_name",
                  "sharing_mode", "gpu_model",
                  "fraction_numerator", "fraction_denominator", "capacity_units", "node_labels", "tolerations",
                  "runtime_class_name", "is_active"]
        labels = {"fraction_numerator": "Fraction of a GPU: numerator", "fraction_denominator": "denominator",
                  "capacity_units": "Capacity (units)"}
        widgets = {"node_labels": forms.Textarea(attrs={"rows": 4}), "tolerations": forms.Textarea(attrs={"rows": 3}),
                   "extra_resources": forms.Textarea(attrs={"rows": 2})}
        # ASCII digits only: Django's IntegerField reads "１" as 1.
        field_classes = {"fraction_numerator": WholeNumberField, "fraction_denominator": WholeNumberField,
                         "capacity_units": WholeNumberField, "resource_per_unit": WholeNumberField,
                         "memory_gib_per_unit": WholeNumberField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["slug"].disabled = True
            self.fields["slug"].help_text = "The Kueue ResourceFlavor's name; it cannot change."
        # A blank JSON box means "none", not "invalid".
        self.fields["node_labels"].required = False
        self.fields["tolerations"].required = False
        self.fields["extra_resources"].required = False
        self.fields["resource_per_unit"].required = False
        self.fields["memory_gib_per_unit"].required = False

    def clean_node_labels(self) -> Any:
        return self.cleaned_data.get("node_labels") or {}

    def clean_tolerations(self) -> Any:
        return self.cleaned_data.get("tolerations") or []

    def clean_resource_per_unit(self) -> Any:
        value = self.cleaned_data.get("resource_per_unit")
        return 1 if value is None else value  # left blank: one of the resource a unit

    def clean_memory_gib_per_unit(self) -> Any:
        value = self.cleaned_data.get("memory_gib_per_unit")
        return 0 if value is None else value  # left blank: a GPU flavor's none

    def clean_extra_resources(self) -> Any:
        return self.cleaned_data.get("extra_resources") or []
