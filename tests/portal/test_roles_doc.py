"""docs/roles.md is the roles' contract: its matrix is read here and every row is checked against
the code for each role, and every permission the portal defines must have a row. A rule that
changes without the page (or the page without the rule) fails."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from rules.permissions import permissions

from jobs import kinds
from jobs import services as job_services
from jobs.models import Workload, WorkloadKind, WorkloadTemplate
from portal import tokens
from tenants import services as tenant_services
from tenants.models import Department, Membership, Team
from tests.factories import MembershipFactory, QuotaRequestFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "roles.md"
ROLES = ("member", "lead", "finance", "platform admin", "department head")
WHERE = {"own": "their own", "team": "their team's", "other": "another team's"}
REACH = {"all": {"own", "team", "other"}, "team": {"own", "team"}, "own": {"own"}, "—": set()}


@dataclass(frozen=True)
class Row:
    capability: str
    rules: tuple[str, ...]
    on: str
    cells: dict[str, str]


def matrix() -> list[Row]:
    """The rows of the table under "## The matrix", by column name."""
    text = DOC.read_text()
    table = text.split("## The matrix", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        rows.append(Row(capability=cells["Capability"], rules=tuple(re.findall(r"`([^`]+)`", cells["Rule"])),
                        on=cells["On"], cells={role: cells[role] for role in ROLES}))
    return rows


def reach(cell: str) -> set[str]:
    """Where a role's cell says it reaches: its own object, its team's, another team's."""
    base, _, but_not = cell.partition(" but not ")
    return REACH[base] - {but_not}


@dataclass
class Site:
    people: dict[str, Any]  # role -> user
    teammate: Any
    stranger: Any
    vision: Team
    nlp: Team
    templates: dict[str, Any]  # kind -> template
    flavor: Any

    def team_of(self, role: str) -> Team | None:
        # A department head's "team" is a team of the department they head, vision here.
        return self.vision if role in ("member", "lead", "department head") else None

    def make(self, on: str, *, owner: Any, team: Team) -> Any:
        """One object of the kind a row is about, in `team`, owned (launched, filed) by `owner`."""
        if on == "Team":
            return team
        if on in ("Workload", "Notebook", "Inference server"):
            kind = {"Workload": WorkloadKind.TRAINING, "Notebook": WorkloadKind.NOTEBOOK,
                    "Inference server": WorkloadKind.INFERENCE}[on]
            return Workload.objects.create(team=team, owner=owner, template_version=self.templates[kind].current,
                                           name="w", flavor=self.flavor, units=1, cpu=1, memory_gib=1, priority="normal")
        if on == "Quota request":
            return QuotaRequestFactory(team=team, requester=owner)
        if on == "Template":
            return WorkloadTemplate.objects.create(slug=f"t-{uuid.uuid4().hex[:8]}", name="T", kind=WorkloadKind.TRAINING,
                                                   is_global=False, owner_team=team)
        if on == "API token":
            return tokens.api_token_create(user=owner, name="t", expires_in_days=7)[0]
        raise AssertionError(f"docs/roles.md names an object kind the test does not know: {on}")

    def objects(self, on: str, role: str, cell: str) -> dict[str, Any]:
        """The objects a cell makes a claim about: the role's own, its team's (someone else's), another team's."""
        user, team = self.people[role], self.team_of(role)
        found = {"other": self.make(on, owner=self.stranger, team=self.nlp)}
        if team is not None and on != "Template":
            found["team"] = self.make(on, owner=self.teammate, team=team)
            found["own"] = found["team"] if on == "Team" else self.make(on, owner=user, team=team)
        elif team is not None:
            found["team"] = self.make(on, owner=self.teammate, team=team)
        elif "own" in cell and on != "Template":
            # Someone in no team still owns what they filed or launched elsewhere (a platform admin's
            # request, anyone's token): checked where the page claims something about it.
            found["own"] = self.make(on, owner=user, team=self.nlp)
        return found


@pytest.fixture
def site(flavor: Any) -> Site:
    vision, nlp = TeamFactory.create(slug="vision"), TeamFactory.create(slug="nlp")
    people = {
        "member": UserFactory.create(username="alice"), "lead": UserFactory.create(username="lena"),
        "finance": UserFactory.create(username="fiona", is_finance=True),
        "platform admin": UserFactory.create(username="root", is_platform_admin=True, is_staff=True),
        "department head": UserFactory.create(username="hedda"),
    }
    MembershipFactory(team=vision, user=people["member"])
    MembershipFactory(team=vision, user=people["lead"], role=Membership.Role.LEAD)
    teammate, stranger = UserFactory(username="bob"), UserFactory(username="oscar")
    MembershipFactory(team=vision, user=teammate)
    MembershipFactory(team=nlp, user=stranger, role=Membership.Role.LEAD)
    admin = people["platform admin"]
    # Vision is in a department with two approval levels, which the head heads.
    research = tenant_services.department_save(actor=admin, department=Department(name="Research", slug="research",
                                                                                  head_approves=True),
                                               heads=[people["department head"]])
    vision = tenant_services.team_update(actor=admin, team=vision, department=research)
    templates = {kind: job_services.template_create(user=admin, slug=kind, name=kind, kind=kind, flavors=[flavor],
                                                    image="x/y:1", port=8080)
                 for kind in kinds.runnable()}
    return Site(people=people, teammate=teammate, stranger=stranger, vision=vision, nlp=nlp, templates=templates,
                flavor=flavor)


def holds(rule: str, user: Any, obj: Any) -> bool:
    if rule.endswith(".objects.for_user"):
        model = next(m for m in apps.get_models() if m.__name__ == rule.split(".")[0])
        return bool(model._default_manager.for_user(user).filter(pk=obj.pk).exists())  # type: ignore[attr-defined]
    return bool(user.has_perm(rule, obj) if obj is not None else user.has_perm(rule))


def test_the_matrix_names_every_permission_the_portal_defines():
    named = {rule for row in matrix() for rule in row.rules}

    assert sorted(set(permissions) - named) == []
    assert sorted(rule for rule in named - set(permissions) if not rule.endswith(".objects.for_user")) == []


def test_every_cell_of_the_matrix_is_one_the_page_explains():
    for row in matrix():
        for role, cell in row.cells.items():
            if row.on == "—":
                assert cell in ("yes", "—"), (row.capability, role, cell)
            else:
                base, _, but_not = cell.partition(" but not ")
                assert base in REACH and but_not in ("", "own"), (row.capability, role, cell)


@pytest.mark.parametrize("row", matrix(), ids=lambda row: row.capability[:60])
def test_each_role_holds_exactly_what_the_matrix_says(site, row):
    wrong = []
    for role in ROLES:
        user, cell = site.people[role], row.cells[role]
        for rule in row.rules:
            if row.on == "—":
                if (held := holds(rule, user, None)) != (cell == "yes"):
                    wrong.append(f"{role} {'holds' if held else 'lacks'} {rule}; the page says {cell}")
                continue
            allowed = reach(cell)
            for where, obj in site.objects(row.on, role, cell).items():
                if (held := holds(rule, user, obj)) != (where in allowed):
                    wrong.append(f"{role} {'holds' if held else 'lacks'} {rule} on the {row.on.lower()} that is "
                                 f"{WHERE[where]}; the page says {cell}")
    assert wrong == []
