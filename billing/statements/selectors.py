"""Reads of closed statements: which ones a user may see, and one statement as sections per team.

Finance and platform admins see every statement and every team on it; a team lead sees the
statements that bill their team, and only their team's lines and adjustments. A team the caller
may not see is answered as one that is not on the statement (404), never as a refusal.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import AnonymousUser
from django.db.models import DecimalField, F, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.http import Http404

from billing import periods
from billing.models import Account, Adjustment, Statement, StatementEnergy, StatementLine
from billing.models.statements import led_accounts
from billing.money import minor_unit
from portal.models import User
from portal.roles import sees_all_teams
from tenants.models import Team

KIND_ORDER = {StatementLine.Kind.USAGE: 0, StatementLine.Kind.IDLE_SHARE: 1, StatementLine.Kind.UNALLOCATED: 2}


@dataclass
class TeamSection:
    """One team's part of a statement: its lines, its adjustments and their sums."""

    account_id: int
    slug: str
    name: str
    cost_center: str
    department: str = ""  # its department's name at close; "" for none
    lines: list[StatementLine] = field(default_factory=list)
    adjustments: list[Adjustment] = field(default_factory=list)
    energy: StatementEnergy | None = None  # its GPUs' energy in the month, when any was metered

    @property
    def charged(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal(0))

    @property
    def adjusted(self) -> Decimal:
        return sum((adjustment.amount for adjustment in self.adjustments), Decimal(0))

    @property
    def total(self) -> Decimal:
        return self.charged + self.adjusted

    @property
    def gpu_hours(self) -> Decimal:
        return sum((line.gpu_hours for line in self.lines), Decimal(0))


@dataclass
class StatementPicture:
    """A statement as the pages and exports show it, limited to the teams the reader may see."""

    statement: Statement
    teams: list[TeamSection]
    unallocated: list[StatementLine]
    whole: bool  # every team (finance's view) rather than one team's part

    @property
    def quantum(self) -> Decimal:
        return Decimal(1).scaleb(-minor_unit(self.statement.currency))

    @property
    def charged(self) -> Decimal:
        return sum((team.charged for team in self.teams), Decimal(0))

    @property
    def adjusted(self) -> Decimal:
        return sum((team.adjusted for team in self.teams), Decimal(0))

    @property
    def total(self) -> Decimal:
        return self.charged + self.adjusted

    @property
    def unallocated_total(self) -> Decimal:
        return sum((line.amount for line in self.unallocated), Decimal(0))

    def money(self, value: Decimal) -> Decimal:
        return value.quantize(self.quantum)

    @property
    def energy(self) -> list[StatementEnergy]:
        return [team.energy for team in self.teams if team.energy is not None]

    @property
    def kwh(self) -> Decimal:
        """The sum of the teams' rounded kWh, as the money is of its rounded lines."""
        return sum((row.kwh for row in self.energy), Decimal("0.00"))

    @property
    def kg_co2e(self) -> Decimal | None:
        known = [row.kg_co2e for row in self.energy if row.kg_co2e is not None]
        return sum(known, Decimal("0.00")) if known else None


def statements_for_user(*, user: User | AnonymousUser) -> list[Statement]:
    """The sealed statements the user may see, newest first, each with `adjusted_total` (its
    adjustments summed) and `total_charged` (its lines charged to teams plus those), so a list
    shows the same total charged as the statement itself."""
    adjusted = Coalesce(Sum("adjustments__amount"), Value(Decimal(0)), output_field=DecimalField(max_digits=20,
                                                                                                 decimal_places=3))
    return list(Statement.objects.for_user(user).filter(sealed=True).annotate(adjusted_total=adjusted)
                .annotate(total_charged=F("charged_total") + F("adjusted_total")).order_by("-month"))


def statement_visible(*, user: User | AnonymousUser, month: str) -> Statement:
    """The sealed statement of a month written YYYY-MM, among those the user may see, or 404."""
    first = periods.month_parse(month or "")
    if first is None:
        raise Http404
    statement = Statement.objects.for_user(user).filter(sealed=True, month=first).first()
    if statement is None:
        raise Http404
    return statement


def statement_account(*, statement: Statement, slug: str) -> Account | None:
    """The team an adjustment of the statement is for, by its slug: a team its lines bill (the
    newest account if a slug was reused), else any team that exists now, which may get a credit
    or a fixed fee in a month it used nothing."""
    slug = slug.strip()
    on_statement = statement.lines.exclude(account=None).values("account_id")
    found = Account.objects.filter(slug=slug, pk__in=on_statement).order_by("-pk").first()
    if found is not None:
        return found
    team = Team.objects.filter(slug=slug).first()
    return Account.for_team(team) if team is not None else None


def adjustable_teams(*, statement: Statement) -> list[tuple[str, str]]:
    """(slug, name) of every team an adjustment may be for: those the statement bills and every
    team that exists now, by slug."""
    named = dict(statement.lines.exclude(account=None).values_list("account_slug", "account_name"))
    named.update(Team.objects.values_list("slug", "name"))
    return sorted(named.items())


def readable_accounts(*, user: User | AnonymousUser) -> set[int] | None:
    """The accounts whose lines the user may read on any statement; None for every account."""
    if sees_all_teams(user):
        return None
    return set(led_accounts(user).values_list("pk", flat=True))


def statement_picture(*, user: User | AnonymousUser, statement: Statement, team: str | None = None) -> StatementPicture:
    """The statement's teams the user may read, or just the one named by `team` (its slug on the
    statement; 404 when it is not there or not the user's to read)."""
    allowed = readable_accounts(user=user)
    lines = StatementLine.objects.filter(statement=statement)
    adjustments = Adjustment.objects.filter(statement=statement)
    energy = StatementEnergy.objects.filter(statement=statement)
    if allowed is not None:
        lines = lines.filter(account__in=allowed)
        adjustments = adjustments.filter(account__in=allowed)
        energy = energy.filter(account__in=allowed)
    if team:
        chosen = Account.objects.filter(Q(pk__in=lines.values("account_id")) | Q(pk__in=adjustments.values("account_id")),
                                        slug=team)
        lines, adjustments = lines.filter(account__in=chosen), adjustments.filter(account__in=chosen)
        energy = energy.filter(account__in=chosen)
        if not chosen.exists():
            raise Http404
    sections: dict[int, TeamSection] = {}
    unallocated: list[StatementLine] = []
    for line in sorted(lines, key=_line_order):
        if line.account_id is None:
            unallocated.append(line)
            continue
        _section(sections, line.account_id, line.account_slug, line.account_name, line.cost_center,
                 line.department).lines.append(line)
    for adjustment in adjustments.order_by("created_at", "id"):
        _section(sections, adjustment.account_id, adjustment.account_slug, adjustment.account_name,
                 adjustment.cost_center, adjustment.department).adjustments.append(adjustment)
    for row in energy:
        if row.account_id in sections:  # a team the statement bills nothing has no section to show it in
            sections[row.account_id].energy = row
    teams = sorted(sections.values(), key=lambda section: (section.slug, section.name, section.account_id))
    whole = allowed is None and not team
    return StatementPicture(statement=statement, teams=teams, unallocated=unallocated if whole else [], whole=whole)


def _section(sections: dict[int, TeamSection], account_id: int, slug: str, name: str, cost_center: str,
             department: str) -> TeamSection:
    if account_id not in sections:
        sections[account_id] = TeamSection(account_id=account_id, slug=slug, name=name, cost_center=cost_center,
                                           department=department)
    return sections[account_id]


def _line_order(line: StatementLine) -> tuple[int, str, dt.datetime, int, int]:
    """Kind, flavor, period, GPU fraction: no database id, so the same data always reads in the same order."""
    return (KIND_ORDER.get(StatementLine.Kind(line.kind), 9), line.flavor_slug, line.period_start, line.fraction_denominator,
            line.fraction_numerator)


NO_DEPARTMENT = "No department"


@dataclass(frozen=True)
class DepartmentTotal:
    """A department's part of a statement: the sums of its teams' sections, as closed."""

    name: str  # NO_DEPARTMENT for the teams in none
    department: str  # "" for the teams in none
    teams: int
    gpu_hours: Decimal
    charged: Decimal
    adjusted: Decimal

    @property
    def total(self) -> Decimal:
        return self.charged + self.adjusted


def department_totals(picture: StatementPicture) -> list[DepartmentTotal]:
    """Per department its teams were in at close, the sums of their sections (lines, adjustments,
    total), the teams in none on a line of their own last, so the lines add up to the picture's
    totals; none where no team on it was in a department."""
    if not any(section.department for section in picture.teams):
        return []
    grouped: dict[str, list[TeamSection]] = defaultdict(list)
    for section in picture.teams:
        grouped[section.department].append(section)
    return [DepartmentTotal(name=name or NO_DEPARTMENT, department=name, teams=len(sections),
                            gpu_hours=sum((s.gpu_hours for s in sections), Decimal(0)),
                            charged=sum((s.charged for s in sections), Decimal(0)),
                            adjusted=sum((s.adjusted for s in sections), Decimal(0)))
            for name, sections in sorted(grouped.items(), key=lambda item: (not item[0], item[0]))]


def flavor_totals(picture: StatementPicture) -> list[tuple[str, Decimal, Decimal]]:
    """(flavor name, GPU-hours, amount) over the picture's team lines, by flavor name."""
    hours: dict[str, Decimal] = defaultdict(Decimal)
    amounts: dict[str, Decimal] = defaultdict(Decimal)
    for team in picture.teams:
        for line in team.lines:
            hours[line.flavor_name] += line.gpu_hours
            amounts[line.flavor_name] += line.amount
    return [(name, hours[name], amounts[name]) for name in sorted(hours)]
