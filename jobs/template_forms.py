"""The template editor's form. It parses what an author typed into the settings a version holds
(jobs.services.TEMPLATE_VERSION_FIELDS) and the parameter declarations of jobs/parameters.py;
every rule about them is the services' (`_check_version`), so the page and the API agree.

Parameters are repeated rows (name, type, default, min, max, choices, mount path, access)
rather than a formset, as the quota request's lines are. Access is a volume's: read-only unless
the author chooses "writable" (`read_only: false`). The types offered are jobs.parameters.TYPES,
so a new type appears here by itself; keys a declaration holds beyond the rows' (a new type's
own settings) are kept from the current version when its row keeps its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from jobs import kinds, parameters
from jobs.idle_policy import IdleAction
from jobs.models import Priority, WorkloadKind, WorkloadTemplate, WorkloadTemplateVersion
from portal.adapters import WholeNumberField
from portal.errors import DomainError
from portal.models import User
from tenants.models import Flavor, Membership, Team, user_team_roles

ROW_KEYS = ("name", "type", "default", "min", "max", "choices", "mount_path", "access")
WRITABLE = "writable"  # the access a volume row may choose; anything else is read-only
BLANK_ROWS = 2


@dataclass(frozen=True)
class ParameterRow:
    """One parameter row as typed, so a refused form shows it again."""

    index: int
    name: str = ""
    type: str = ""
    default: str = ""
    min: str = ""
    max: str = ""
    choices: str = ""
    mount_path: str = ""  # where a volume or git parameter is mounted
    access: str = ""  # WRITABLE: a volume the workload may write to

    @property
    def is_blank(self) -> bool:
        return not self.name.strip()


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):  # a git default: "URL REVISION", as the row takes it
        return " ".join(str(part) for part in (value.get("url"), value.get("revision")) if part)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _row_text(spec: dict[str, Any], key: str) -> str:
    """A declaration's setting as its row shows it."""
    if key == "choices" and spec.get("type") == "credential":  # its kind is written in its row's choices
        return str(spec.get("credential_kind", ""))
    if key == "choices":
        return ", ".join(map(str, spec.get(key) or []))
    if key == "access":
        return WRITABLE if spec.get("read_only") is False else ""
    return _text(spec.get(key))


def _number(text: str) -> Any:
    """A bound as a number when it reads as one (ASCII digits, as jobs.parameters reads a launch's
    values: float() also reads "１", "1_0", "nan" and "inf"); otherwise the text, which
    check_declarations refuses with a sentence naming the parameter."""
    text = text.strip()
    if not text:
        return None
    if parameters.WHOLE_NUMBER.fullmatch(text):
        return int(text)
    if parameters.DECIMAL_NUMBER.fullmatch(text):
        return float(text)
    return text


def _default(kind: str, text: str) -> Any:
    text = text.strip()
    if not text:
        return None
    if kind in ("int", "float"):
        return _number(text)
    if kind == "bool":
        return text.lower() in {"true", "1", "yes", "on"}
    if kind == "git":
        url, _, revision = text.partition(" ")
        return {"url": url, "revision": revision.strip()}
    return text


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def authorable_teams(user: User | AnonymousUser) -> QuerySet[Team]:
    """The teams whose own templates the user may write: every team for a platform admin, the
    teams they lead otherwise."""
    if user.has_perm("jobs.create_global_template"):
        return Team.objects.order_by("name")
    led = [team_id for team_id, role in user_team_roles(user).items() if role == Membership.Role.LEAD]
    return Team.objects.filter(pk__in=led).order_by("name")


class TemplateEditorForm(forms.Form):
    # What the template is (a new one only: a template's kind, slug and owner never change).
    owner_team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", required=False,
                                        empty_label="None: one of the portal's own templates",
                                        label="Team template of")
    slug = forms.CharField(max_length=40, required=False)
    name = forms.CharField(max_length=80, required=False)
    kind = forms.ChoiceField(choices=WorkloadKind.choices, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    # Who sees one of the portal's own templates (platform admins).
    is_global = forms.BooleanField(required=False, label="Every team may use it")
    teams = forms.ModelMultipleChoiceField(queryset=Team.objects.order_by("name"), to_field_name="slug", required=False,
                                           widget=forms.CheckboxSelectMultiple, label="Or only these teams")
    # The version's settings.
    image = forms.CharField(max_length=300)
    command = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False,
                              help_text="One argument per line; no shell is put in front of them.")
    args = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False,
                           help_text="One argument per line; {name} puts a parameter's value in a whole argument.")
    env = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False,
                          help_text="NAME=value, one per line; values may use {name} placeholders.")
    flavors = forms.ModelMultipleChoiceField(queryset=Flavor.objects.filter(is_active=True).order_by("name"),
                                             to_field_name="slug", widget=forms.CheckboxSelectMultiple,
                                             error_messages={"required": "Choose at least one GPU flavor the template may use."})
    default_units = WholeNumberField(min_value=0)
    max_units = WholeNumberField(min_value=0)
    default_cpu = WholeNumberField(min_value=0)
    max_cpu = WholeNumberField(min_value=0)
    default_memory_gib = WholeNumberField(min_value=0, label="Default memory (GiB)")
    max_memory_gib = WholeNumberField(min_value=0, label="Max memory (GiB)")
    default_priority = forms.ChoiceField(choices=Priority.choices)
    allowed_priorities = forms.MultipleChoiceField(choices=Priority.choices, widget=forms.CheckboxSelectMultiple,
                                                   label="Tiers members may use",
                                                   error_messages={"required": "Allow members at least one tier."})
    max_runtime_seconds = WholeNumberField(min_value=0, label="Max run time (seconds)")
    # Asked of every template; what each kind makes of them its module says (jobs/kinds/).
    storage_gib = WholeNumberField(min_value=0, label=f"Storage (GiB, {kinds.words(kinds.names(asks_storage=True))}; 0 for none)")
    port = WholeNumberField(min_value=0, label=f"Port ({kinds.words(kinds.names(serves_http=True))}; 0 for none)")
    # The idle policy (templates/jobs/_template_idle_policy.html): empty takes the platform's
    # default; a value outside the platform's bounds is refused by jobs.idle_policy, in words.
    idle_threshold_percent = WholeNumberField(min_value=0, max_value=100, required=False,
                                                label="Idle below this GPU engine active (%)")
    idle_window_minutes = WholeNumberField(min_value=1, required=False, label="Idle for (minutes) before a warning")
    idle_action = forms.ChoiceField(choices=[("", "The platform's default"), *IdleAction.choices], required=False,
                                    label="Then, after the grace")
    idle_grace_minutes = WholeNumberField(min_value=0, required=False, label="Grace after the warning (minutes)")
    idle_minutes = WholeNumberField(min_value=0, label=f"Older {kinds.words(kinds.names(legacy_idle_minutes=True))}: "
                                                       "stop after this many idle minutes (0: never)")
    # Where the preview's dry run asks the cluster.
    check_in = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", required=False,
                                      label="Check in the namespace of", empty_label="No team: do not check")

    LIMIT_FIELDS = ("default_units", "max_units", "default_cpu", "max_cpu", "default_memory_gib", "max_memory_gib",
                    "max_runtime_seconds", "storage_gib", "port", "idle_minutes")
    IDLE_FIELDS = ("idle_threshold_percent", "idle_window_minutes", "idle_action", "idle_grace_minutes")

    def __init__(self, data: Any = None, *, user: User | AnonymousUser, template: WorkloadTemplate | None = None) -> None:
        self.template = template
        self.version: WorkloadTemplateVersion | None = template.current if template else None
        super().__init__(data, initial=self._initial())
        self.is_admin = user.has_perm("jobs.create_global_template")
        authorable = authorable_teams(user)
        owner_field = self.fields["owner_team"]
        assert isinstance(owner_field, forms.ModelChoiceField)
        owner_field.queryset = authorable
        if not self.is_admin and template is None:
            owner_field.required = True
            owner_field.empty_label = None
        if template is None:
            for name in ("slug", "name", "kind"):
                self.fields[name].required = True
            # A new template only of a kind the site's queue backend runs (jobs.services says why not).
            kind_field = self.fields["kind"]
            assert isinstance(kind_field, forms.ChoiceField)
            kind_field.choices = [(name, label) for name, label in WorkloadKind.choices if name in kinds.runnable()]
        check_field = self.fields["check_in"]
        assert isinstance(check_field, forms.ModelChoiceField)
        check_field.queryset = self._check_teams(user, authorable)
        # Checked by default: in the template's own team, else the first team offered.
        check_field.initial = check_field.queryset.values_list("slug", flat=True).first()
        self.parameter_rows = self._rows(data)

    def _check_teams(self, user: User | AnonymousUser, authorable: QuerySet[Team]) -> QuerySet[Team]:
        if self.template is not None and self.template.owner_team_id is not None:
            return Team.objects.filter(pk=self.template.owner_team_id)
        return Team.objects.for_user(user).order_by("name") if self.is_admin else authorable

    def _initial(self) -> dict[str, Any]:
        version = self.version
        if version is None:
            return {"is_global": True, "default_units": 1, "max_units": 8, "default_cpu": 4, "max_cpu": 32,
                    "default_memory_gib": 16, "max_memory_gib": 256, "default_priority": Priority.NORMAL,
                    "allowed_priorities": [Priority.LOW, Priority.NORMAL], "max_runtime_seconds": 24 * 3600,
                    "storage_gib": 0, "port": 0, "idle_minutes": 0}
        template = self.template
        assert template is not None
        initial = {field: getattr(version, field) for field in (*self.LIMIT_FIELDS, *self.IDLE_FIELDS, "image",
                                                                 "default_priority", "allowed_priorities")}
        initial.update(command="\n".join(version.command), args="\n".join(version.args),
                       env="\n".join(f"{key}={value}" for key, value in version.env.items()),
                       flavors=[flavor.slug for flavor in version.flavors.all()], is_global=template.is_global,
                       teams=[team.slug for team in template.teams.all()])
        return initial

    def _rows(self, data: Any) -> list[ParameterRow]:
        if data is not None:
            typed = [data.getlist(f"param_{key}") for key in ROW_KEYS]
            count = max(len(values) for values in typed)
            rows = [ParameterRow(index, *(values[index] if index < len(values) else "" for values in typed))
                    for index in range(count)]
            return rows or [ParameterRow(0)]
        declared = self.version.parameters if self.version else []
        rows = [ParameterRow(index, *(_row_text(spec, key) for key in ROW_KEYS)) for index, spec in enumerate(declared)]
        return rows + [ParameterRow(len(rows) + n) for n in range(BLANK_ROWS)]

    def declarations(self) -> list[dict[str, Any]]:
        """The parameter rows as jobs/parameters.py declarations, blank rows left out."""
        kept = {spec.get("name"): spec for spec in (self.version.parameters if self.version else [])}
        declared = []
        for row in self.parameter_rows:
            if row.is_blank:
                continue
            name, kind = row.name.strip(), row.type.strip()
            spec: dict[str, Any] = {key: value for key, value in kept.get(name, {}).items()
                                    if key not in ROW_KEYS and key != "read_only"}
            spec.update(name=name, type=kind)
            default = _default(kind, row.default)
            if default is not None:
                spec["default"] = default
            for key in ("min", "max"):
                bound = _number(getattr(row, key))
                if bound is not None:
                    spec[key] = bound
            choices = [choice.strip() for choice in row.choices.split(",") if choice.strip()]
            if kind == "credential":
                spec["credential_kind"] = row.choices.strip()
            elif choices:
                spec["choices"] = choices
            if row.mount_path.strip():
                spec["mount_path"] = row.mount_path.strip()
            if row.access == WRITABLE:
                if kind != "volume":
                    raise DomainError(f"Parameter {name}: only a volume can be writable; a {kind} parameter is "
                                      "not a mounted volume.", field="parameters")
                spec["read_only"] = False
            declared.append(spec)
        return declared

    def version_fields(self) -> dict[str, Any]:
        """The settings of the version to save, as jobs.services.template_create/template_revise take them."""
        data = self.cleaned_data
        env: dict[str, str] = {}
        for line in _lines(data["env"]):
            name, equals, value = line.partition("=")
            if not equals or not name.strip():
                raise DomainError(f"“{line}” is not NAME=value.", field="env")
            env[name.strip()] = value.strip()
        fields = {field: data[field] for field in self.LIMIT_FIELDS}
        fields.update({field: data[field] for field in self.IDLE_FIELDS})  # None / "": the platform's default
        fields.update(image=data["image"].strip(), command=_lines(data["command"]), args=_lines(data["args"]), env=env,
                      default_priority=data["default_priority"], allowed_priorities=list(data["allowed_priorities"]),
                      parameters=self.declarations())
        return fields

    @property
    def parameter_types(self) -> tuple[str, ...]:
        return parameters.TYPES
