"""The launch form, and the platform's idle policy form. They parse what the person typed; the
bounds, quota and parameter rules live in services.check_launch (and the idle policy's in
jobs.idle_policy), so the forms, the live hint and the API refuse with the same words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser
from django.forms import BoundField
from django.http import QueryDict

from jobs import credentials, reclaim, rules, selectors, services
from jobs.idle_policy import IdleAction
from jobs.models import IdleDefaults, Priority, TeamCredential, WorkloadTemplate, WorkloadTemplateVersion
from portal.adapters import WholeNumberField, add_refusal
from portal.errors import DomainError
from portal.models import User
from tenants import queueing
from tenants import selectors as tenant_selectors
from tenants.models import Flavor, Team

PARAMETER_PREFIX = "p_"
REVISION_SUFFIX = "-revision"  # a hyphen: no parameter's name holds one, so it never meets another's field


@dataclass(frozen=True)
class ParameterRow:
    """One declared parameter with the input that edits it."""

    spec: dict[str, Any]
    field: BoundField
    revision: BoundField | None = None  # a git parameter's second input
    claims: list[str] | None = None  # a volume parameter's choices: the team's claims (None: unread)
    credentials: tuple[tuple[str, str], ...] = ()  # a credential parameter's choices: (name, hint)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def type(self) -> str:
        return str(self.spec["type"])

    @property
    def choices(self) -> list[str]:
        return [str(choice) for choice in self.spec.get("choices") or []]

    @property
    def step(self) -> str:
        return "1" if self.type == "int" else "any"


class LaunchForm(forms.Form):
    """Team, template, resources and the template's declared parameters.

    Flavors outside the template's list are accepted here and refused by the service, so the
    refusal names the flavors that are allowed.
    """

    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", empty_label="Choose a team…",
                                  error_messages={"invalid_choice": "You may not launch workloads for this team."})
    # By id: a slug is unique only within its team, so two templates the user sees may share one.
    template = forms.ModelChoiceField(queryset=WorkloadTemplate.objects.none(), empty_label="Choose a template…")
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.filter(is_active=True), to_field_name="slug",
                                    empty_label="Choose a flavor…")
    also_accept = forms.ModelMultipleChoiceField(
        queryset=Flavor.objects.filter(is_active=True), to_field_name="slug", required=False,
        label="Or run on whichever of these has room first")
    units = WholeNumberField(required=False, label="GPU units")
    cpu = WholeNumberField(required=False, label="CPU cores")
    memory_gib = WholeNumberField(required=False, label="Memory (GiB)")
    priority = forms.ChoiceField(choices=Priority.choices, required=False)
    name = forms.CharField(max_length=60, required=False, strip=True)

    def __init__(self, data: QueryDict | None = None, *, user: User | AnonymousUser, templates: list[WorkloadTemplate],
                 team: Team | None = None, template: WorkloadTemplate | None = None, initial_name: str = "") -> None:
        super().__init__(data)
        self.teams = selectors.launchable_teams(user)
        team_field: forms.ModelChoiceField = self.fields["team"]  # type: ignore[assignment]
        team_field.queryset = Team.objects.filter(pk__in=[t.pk for t in self.teams]).order_by("name")
        template_field: forms.ModelChoiceField = self.fields["template"]  # type: ignore[assignment]
        template_field.queryset = WorkloadTemplate.objects.filter(pk__in=[t.pk for t in templates])
        self.templates = templates
        if team is None and len(self.teams) == 1:
            team = self.teams[0]
        self.chosen_team, self.chosen_template = team, template
        self.version: WorkloadTemplateVersion | None = template.versions.all()[0] if template is not None else None
        self.allowed_flavors: list[Flavor] = list(self.version.flavors.all()) if self.version else []
        self.initial.update({"team": team.slug if team else None, "template": template.pk if template else None,
                             "name": initial_name})
        if self.version is not None:
            version = self.version
            self.initial.update({"flavor": self._default_flavor(team), "units": version.default_units,
                                 "priority": version.default_priority})
            if not self.cpu_only:  # on a CPU-only flavor the units are the cores and the memory
                self.initial.update({"cpu": version.default_cpu, "memory_gib": version.default_memory_gib})
        self.parameter_rows = self._add_parameter_fields()
        self._user = user

    @property
    def cpu_only(self) -> bool:
        """The chosen template runs on CPU-only flavors (a template's flavors are all CPU or all GPU)."""
        return bool(self.allowed_flavors) and all(flavor.is_cpu for flavor in self.allowed_flavors)

    def _default_flavor(self, team: Team | None) -> str | None:
        """The first allowed flavor the team holds a guarantee of, so that launching with the
        defaults runs on the team's own quota rather than borrowing; else the first allowed."""
        if not self.allowed_flavors:
            return None
        held = tenant_selectors.team_guarantees(team=team) if team is not None else {}
        return next((f.slug for f in self.allowed_flavors if held.get(f.pk, 0) > 0), self.allowed_flavors[0].slug)

    @property
    def interchangeable_flavors(self) -> list[Flavor]:
        """The allowed flavors that share their resource name with another allowed one: a launch
        may accept several of those ("any whole 80 GB GPU"), and runs on the one Kueue admits. None
        where the site's queue runs a workload only on the flavor named (Volcano)."""
        if not queueing.backend().flavor_alternatives:
            return []
        by_resource: dict[str, list[Flavor]] = {}
        for flavor in self.allowed_flavors:
            if not flavor.is_cpu:  # no queue chooses among CPU-only flavors: a launch names one
                by_resource.setdefault(flavor.resource_name, []).append(flavor)
        return [flavor for group in by_resource.values() if len(group) > 1 for flavor in group]

    @property
    def also_accepted_slugs(self) -> set[str]:
        return {str(value) for value in (self["also_accept"].value() or [])}

    @property
    def offered_priorities(self) -> list[tuple[str, str]]:
        """The tiers this person may launch the chosen template at in the chosen team. Every tier
        stays valid input, so a tier sent anyway is refused by the service with its sentence."""
        if self.version is None:
            return list(Priority.choices)
        if self.chosen_team is None:
            allowed = [tier for tier in Priority.values if tier in self.version.allowed_priorities]
        else:
            allowed = rules.allowed_priorities(self._user, self.chosen_team, self.version)
        return [(value, label) for value, label in Priority.choices if value in allowed]

    @property
    def missing_priorities(self) -> list[str]:
        """Why each tier not offered is missing, in a sentence."""
        offered = {value for value, _ in self.offered_priorities}
        return [rules.why_not(value) for value in Priority.values if value not in offered]

    def _add_parameter_fields(self) -> list[ParameterRow]:
        specs = self.version.parameters if self.version is not None else []
        for spec in specs:
            key = PARAMETER_PREFIX + spec["name"]
            if spec["type"] == "bool":
                self.fields[key] = forms.BooleanField(required=False, initial=bool(spec.get("default")))
            elif spec["type"] == "git":
                default = spec.get("default") or {}
                self.fields[key] = forms.CharField(required=False, strip=True, initial=default.get("url", ""))
                self.fields[key + REVISION_SUFFIX] = forms.CharField(required=False, strip=True,
                                                                     initial=default.get("revision", ""))
                self.initial[key + REVISION_SUFFIX] = self.fields[key + REVISION_SUFFIX].initial
            elif spec["type"] in ("args", "env"):
                # One per line: an argument, or NAME=value; the service parses and bounds them.
                default = spec.get("default") or ([] if spec["type"] == "args" else {})
                lines = default if isinstance(default, list) else [f"{k}={v}" for k, v in default.items()]
                self.fields[key] = forms.CharField(required=False, strip=False, initial="\n".join(map(str, lines)))
            else:
                # Text, not numbers: the service coerces and bounds them, with its own messages.
                self.fields[key] = forms.CharField(required=False, strip=True, initial=spec.get("default", ""))
            self.initial[key] = self.fields[key].initial
        volumes = any(spec["type"] == "volume" for spec in specs)
        # Only for a team the person may launch for: finance and admins see every team, not its volumes' names.
        launchable = self.chosen_team is not None and self.chosen_team.pk in {team.pk for team in self.teams}
        claims = selectors.team_claims(team=self.chosen_team) if volumes and launchable and self.chosen_team else None
        kept: dict[str, list[tuple[str, str]]] = {}
        if launchable and self.chosen_team and any(spec["type"] == "credential" for spec in specs):
            for credential in credentials.usable(team=self.chosen_team):
                kept.setdefault(credential.kind, []).append((credential.name, credential.hint))
        return [ParameterRow(spec=spec, field=self[PARAMETER_PREFIX + spec["name"]],
                             revision=self[PARAMETER_PREFIX + spec["name"] + REVISION_SUFFIX] if spec["type"] == "git" else None,
                             claims=claims if spec["type"] == "volume" else None,
                             credentials=tuple(kept.get(spec.get("credential_kind", ""), ())))
                for spec in specs]

    @property
    def team_count(self) -> int:
        return len(self.teams)

    def launch_request(self) -> services.LaunchRequest:
        data = self.cleaned_data
        parameters = {row.name: data.get(PARAMETER_PREFIX + row.name) for row in self.parameter_rows}
        for row in self.parameter_rows:
            if row.type == "git":
                parameters[row.name] = {"url": data.get(PARAMETER_PREFIX + row.name) or "",
                                        "revision": data.get(PARAMETER_PREFIX + row.name + REVISION_SUFFIX) or ""}
        return services.LaunchRequest(
            team=data["team"], template=data["template"], flavor=data["flavor"], units=data.get("units"), cpu=data.get("cpu"),
            memory_gib=data.get("memory_gib"), priority=data.get("priority") or None, name=data.get("name") or "",
            parameters=parameters, also_accept=tuple(data.get("also_accept") or ()),
        )

    def add_domain_error(self, error: DomainError) -> None:
        """Shows a service's refusal next to the input it is about."""
        if error.field != "parameters":
            add_refusal(self, error)
            return
        field = next((PARAMETER_PREFIX + row.name for row in self.parameter_rows
                      if error.message.startswith(f"{row.name} ")), None)
        self.add_error(field, error.message)


# --- The platform's idle policy ---------------------------------------------------------------------

MINUTES_MAX = 2_147_483_647  # the column's limit: a larger number is refused in words, not by the database


def _minutes(label: str, *, least: int = 0) -> forms.IntegerField:
    return WholeNumberField(min_value=least, max_value=MINUTES_MAX, label=label)


def _percent(label: str) -> forms.IntegerField:
    return WholeNumberField(min_value=0, max_value=100, label=label)


class IdleDefaultsForm(forms.Form):
    """The platform's idle policy and the bounds template owners choose within. Parsing only:
    jobs.reclaim.idle_defaults_set checks that each default lies within its bounds, saves and audits."""

    threshold_percent = _percent("Idle below this GPU engine active (%)")
    window_minutes = _minutes("Idle for (minutes) before the owner is warned", least=1)
    action = forms.ChoiceField(choices=IdleAction.choices, label="Then, after the grace")
    grace_minutes = _minutes("Grace after the warning (minutes)")
    min_threshold_percent = _percent("Owners may set the threshold from (%)")
    max_threshold_percent = _percent("up to (%)")
    min_window_minutes = _minutes("Owners may set the window from (minutes)", least=1)
    max_window_minutes = _minutes("up to (minutes)", least=1)
    min_grace_minutes = _minutes("Owners may set the grace from (minutes)")
    max_grace_minutes = _minutes("up to (minutes)")
    allowed_actions = forms.MultipleChoiceField(choices=IdleAction.choices, required=False,
                                                widget=forms.CheckboxSelectMultiple,
                                                label="Actions owners may choose (none ticked: all of them)")

    @classmethod
    def for_defaults(cls, defaults: IdleDefaults, data: QueryDict | None = None) -> IdleDefaultsForm:
        return cls(data, initial={name: getattr(defaults, name) for name in reclaim.IDLE_DEFAULT_FIELDS})


class VolumeCreateForm(forms.Form):
    """A new data volume of the team: parsing only, jobs.volumes.volume_create decides."""

    name = forms.CharField(max_length=63, help_text="Lower-case letters, digits and '-'; launches mount it by this name.")
    storage_class = forms.ChoiceField(label="Storage class")
    size_gib = WholeNumberField(label="Size (GiB)", min_value=1)
    shared = forms.BooleanField(required=False, label="Shared by many pods at once (ReadWriteMany)",
                                help_text="Only where the storage class can; otherwise one node's pods at a time.")

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = sorted(team.storage_quota)
        self.fields["storage_class"].choices = [(name, name) for name in choices]  # type: ignore[attr-defined]
        if len(choices) == 1:
            self.fields["storage_class"].initial = choices[0]


class VolumeResizeForm(forms.Form):
    size_gib = WholeNumberField(label="New size (GiB)", min_value=1)


class SecretTextarea(forms.Textarea):
    """A textarea that, like a password input, never shows what it holds: a private key typed in
    is not put back into the page beside a refusal."""

    def format_value(self, value: Any) -> str | None:
        return None


class CredentialValuesForm(forms.Form):
    """A credential's values, every kind's fields: jobs.credentials says which a kind takes and
    checks them. Password inputs that never show what they hold, even after a refusal."""

    access_key_id = forms.CharField(required=False, strip=False, label="Access key ID",
                                    widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))
    secret_access_key = forms.CharField(required=False, strip=False, label="Secret access key",
                                        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    endpoint = forms.CharField(required=False, label="Endpoint URL",
                               help_text="For storage other than AWS, e.g. https://minio.example.com.")
    region = forms.CharField(required=False, label="Region")
    private_key = forms.CharField(required=False, strip=False, label="Private key", widget=SecretTextarea(
        attrs={"rows": 4, "spellcheck": "false", "autocomplete": "off", "class": "secret-text"}),
        help_text="The deploy key's private half, without a passphrase; the workload sees it as files at the template's path.")
    known_hosts = forms.CharField(required=False, strip=False, label="Known hosts", widget=forms.Textarea(
        attrs={"rows": 2, "spellcheck": "false"}), help_text="The git host's public keys, so the workload can check it.")
    server = forms.CharField(required=False, label="Registry", help_text="e.g. ghcr.io or registry.example.com:5000.")
    username = forms.CharField(required=False, label="User name", widget=forms.TextInput(attrs={"autocomplete": "off"}))
    password = forms.CharField(required=False, strip=False, label="Password or token",
                               widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def values(self) -> dict[str, str]:
        return {name: self.cleaned_data.get(name) or "" for name in self.fields if name not in ("name", "kind")}

    def inputs(self, kind: str) -> list[BoundField]:
        return [self[name] for name in credentials.FIELDS[kind]]

    def groups(self) -> list[tuple[str, str, list[BoundField]]]:
        """Each kind's inputs, to show the chosen kind's only."""
        return [(kind, TeamCredential.Kind(kind).label, self.inputs(kind)) for kind in credentials.FIELDS]


class CredentialCreateForm(CredentialValuesForm):
    name = forms.CharField(max_length=40, help_text="Lower-case letters, digits and '-'; launches choose it by this name.")
    kind = forms.ChoiceField(choices=TeamCredential.Kind.choices)

    field_order = ["name", "kind"]
