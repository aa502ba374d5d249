"""Reads about teams and quota. Each returns plain data or a queryset scoped by the caller."""

from __future__ import annotations

import datetime as dt
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import BigIntegerField, BooleanField, Count, ExpressionWrapper, Func, Prefetch, Q, QuerySet, Sum
from django.utils import timezone

from portal.hooks import Event, Hook
from portal.models import AuditEvent, User
from portal.roles import is_platform_admin, sees_all_teams
from tenants.models import (
    Department,
    DepartmentPool,
    Flavor,
    Membership,
    QuotaGrant,
    QuotaRequest,
    QuotaRequestLine,
    Team,
    current_pool_prefetch,
    headed_team_ids,
    user_team_roles,
)


def guarantees_by_flavor(*, team_ids: list[int] | None = None, permanent_only: bool = False) -> dict[tuple[int, int], int]:
    """Active guaranteed units keyed by (team id, flavor id)."""
    grants = QuotaGrant.objects.active()
    if team_ids is not None:
        grants = grants.filter(team_id__in=team_ids)
    if permanent_only:
        grants = grants.filter(valid_until__isnull=True)
    rows = grants.values("team_id", "flavor_id").annotate(units=Sum("units"))
    return {(row["team_id"], row["flavor_id"]): row["units"] for row in rows}


@dataclass(frozen=True)
class DepartmentRow:
    department: Department
    teams: list[Team]
    guaranteed: list[tuple[Flavor, int]]  # its teams' guarantees summed, per flavor
    pool: list[tuple[Flavor, int]]  # its own guarantee, per flavor


def department_rows() -> list[DepartmentRow]:
    """Every department with its teams, its heads, what its teams are guaranteed together and its
    own pool, in six queries."""
    departments = list(Department.objects.order_by("name").prefetch_related(
        Prefetch("teams", queryset=Team.objects.order_by("name")),
        Prefetch("heads", queryset=User.objects.order_by("username")),
        current_pool_prefetch()))
    team_department = {team.pk: department.pk for department in departments for team in department.teams.all()}
    summed: dict[tuple[int, int], int] = defaultdict(int)
    for (team_id, flavor_id), units in guarantees_by_flavor(team_ids=list(team_department)).items():
        summed[team_department[team_id], flavor_id] += units
    flavors = Flavor.objects.in_bulk({flavor_id for _, flavor_id in summed})
    return [DepartmentRow(department=department, teams=list(department.teams.all()),
                          guaranteed=sorted(((flavors[f], units) for (d, f), units in summed.items()
                                             if d == department.pk and units), key=lambda pair: pair[0].name),
                          pool=[(row.flavor, row.units) for row in department.pool_in_force()])
            for department in departments]


def team_guarantees(*, team: Team, permanent_only: bool = False) -> dict[int, int]:
    """The team's guaranteed units per flavor id."""
    return {
        flavor_id: units
        for (_, flavor_id), units in guarantees_by_flavor(team_ids=[team.pk], permanent_only=permanent_only).items()
    }


@dataclass(frozen=True)
class PersonCap:
    """The most GPUs one member's workloads may hold in the cluster at once, and how it was set."""

    gpus: Fraction
    words: str  # "2 GPUs", or "2 GPUs (25 % of its 8 guaranteed)"

    @property
    def gpus_text(self) -> str:
        return gpus_shown(self.gpus)


def person_gpu_cap(*, team: Team) -> PersonCap | None:
    """The team's per-person cap: its GPUs per person, or its share of the team's guaranteed GPUs
    (physical GPUs of its GPU flavors' grants), whichever is smaller; None without either. A share
    of no guarantee caps nothing: such a team runs on borrowed capacity alone."""
    caps: list[PersonCap] = []
    if team.person_gpu_limit is not None:
        caps.append(PersonCap(gpus=Fraction(team.person_gpu_limit), words=f"{gpus_shown(team.person_gpu_limit)} GPUs"))
    if team.person_share_percent is not None:
        guarantees = team_guarantees(team=team)
        fractions = {pk: Fraction(numerator, denominator) for pk, numerator, denominator in Flavor.objects.filter(
            pk__in=list(guarantees)).values_list("pk", "fraction_numerator", "fraction_denominator")}
        guaranteed = sum((units * fractions[pk] for pk, units in guarantees.items() if units > 0), Fraction(0))
        if guaranteed > 0:
            share = guaranteed * team.person_share_percent / 100
            caps.append(PersonCap(gpus=share, words=f"{gpus_shown(share)} GPUs ({team.person_share_percent} % of its "
                                                     f"{gpus_shown(guaranteed)} guaranteed)"))
    return min(caps, key=lambda cap: cap.gpus, default=None)


def gpus_shown(value: Fraction | Decimal) -> str:
    """GPUs as the pages say them: 2, 1.5, 0.43."""
    text = f"{float(value):.2f}".rstrip("0").rstrip(".")
    return text or "0"


def team_ceiling(*, team: Team, flavor: Flavor) -> int:
    """The most units of the flavor the team could ever hold at once: its guarantee, plus the
    rest of the flavor when it may borrow (never a CPU-only flavor's, which no queue lends)."""
    guaranteed = team_guarantees(team=team).get(flavor.pk, 0)
    return max(flavor.capacity_units, guaranteed) if team.may_borrow and not flavor.is_cpu else guaranteed


def committed_peak(*, flavor_id: int, start: dt.datetime, end: dt.datetime | None,
                   excluding: Collection[int] = (), pools_excluding: int | None = None) -> int:
    """The most units of the flavor promised at any moment of [start, end) (end None: for good):
    every grant not ended, running or reserved for later, but those `excluding` (grants a renewal
    ends as it starts), and every department's pool, which holds for good (but the pool of the
    department `pools_excluding`, which is being set). Two queries; the peak is found by a sweep
    over the grants' starts and ends inside the window."""
    grants = QuotaGrant.objects.filter(flavor_id=flavor_id, ended_at__isnull=True).filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=start))
    if end is not None:
        grants = grants.filter(valid_from__lt=end)
    changes: list[tuple[dt.datetime, int]] = []
    rows = grants.exclude(pk__in=list(excluding)).values_list("valid_from", "valid_until", "units")
    for valid_from, valid_until, units in rows:
        changes.append((max(valid_from, start), units))
        if valid_until is not None and (end is None or valid_until < end):
            changes.append((valid_until, -units))
    (peak,) = _peaks(changes, [start, end or dt.datetime.max.replace(tzinfo=dt.UTC)])
    pools = DepartmentPool.objects.current().filter(flavor_id=flavor_id)
    if pools_excluding is not None:
        pools = pools.exclude(department_id=pools_excluding)
    return max(peak, 0) + (pools.aggregate(units=Sum("units"))["units"] or 0)


def _peaks(changes: list[tuple[Any, int]], bounds: list[Any]) -> list[int]:
    """For each window [bounds[i], bounds[i + 1]), the highest running sum of `changes` (moment,
    units: + where a grant starts, - where it ends) at any moment of it, counting every change up
    to the window's start. At one moment, ends come before starts (sorted by units)."""
    ordered = sorted(changes)
    running, at, peaks = 0, 0, []
    for index in range(len(bounds) - 1):
        while at < len(ordered) and ordered[at][0] <= bounds[index]:  # what runs as the window begins
            running += ordered[at][1]
            at += 1
        peak = running
        while at < len(ordered) and ordered[at][0] < bounds[index + 1]:
            running += ordered[at][1]
            at += 1
            peak = max(peak, running)
        peaks.append(peak)
    return peaks


@dataclass(frozen=True)
class CalendarCell:
    """One flavor's month: the most units promised at any moment of it (teams' grants and
    departments' pools), and the units of reservations that begin in it."""

    month: dt.date
    peak: int
    reserved: int


@dataclass(frozen=True)
class CalendarRow:
    flavor: Flavor
    cells: list[CalendarCell]


class _EpochSeconds(Func):
    """A moment as whole seconds since the epoch, counted by the database: the calendar compares
    thousands of them, and an integer is read far faster than a timestamp."""

    output_field = BigIntegerField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="FLOOR(EXTRACT(EPOCH FROM %(expressions)s))::bigint", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # '%' is escaped twice: once for the template, once for the parameters' "%s" (strftime's %s).
        return self.as_sql(compiler, connection, template="CAST(strftime('%%%%s', %(expressions)s) AS INTEGER)", **extra)


def capacity_calendar(*, months: int = 12, now: dt.datetime | None = None) -> tuple[list[dt.date], list[CalendarRow]]:
    """What each GPU flavor has promised over this month and the next `months` - 1, in the site's
    time zone: per month the peak of every grant running then (reservations included) with the
    departments' pools, and the reservations that begin in it. Three queries, whatever the number
    of teams and grants:
    the months are swept in Python over the grants' starts and ends (in epoch seconds)."""
    now = now or timezone.now()
    zone = ZoneInfo(settings.TIME_ZONE)
    first = timezone.localtime(now, zone).date().replace(day=1)
    starts = [first]
    for _ in range(months):
        starts.append((starts[-1] + dt.timedelta(days=32)).replace(day=1))
    at_now = int(now.timestamp())
    bounds = [max(at_now, int(dt.datetime.combine(day, dt.time.min, tzinfo=zone).timestamp())) for day in starts]
    events: dict[int, list[tuple[int, int]]] = defaultdict(list)
    reserved: dict[tuple[int, int], int] = defaultdict(int)
    rows = (QuotaGrant.objects.filter(ended_at__isnull=True, valid_from__lt=dt.datetime.fromtimestamp(bounds[-1], tz=dt.UTC))
            .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=now))
            .annotate(begins=_EpochSeconds("valid_from"), ends=_EpochSeconds("valid_until"),
                      pending=ExpressionWrapper(Q(began_at__isnull=True), output_field=BooleanField()))
            .values_list("flavor_id", "begins", "ends", "units", "pending"))
    for flavor_id, begins, ends, units, pending in rows:
        events[flavor_id].append((max(begins, at_now), units))
        if ends is not None:
            events[flavor_id].append((ends, -units))
        if pending and begins > at_now:
            reserved[flavor_id, bisect_right(bounds, begins) - 1] += units
    pools = department_pool_totals()
    calendar = []
    for flavor in Flavor.objects.filter(is_active=True).exclude(sharing_mode=Flavor.SharingMode.CPU).order_by("name"):
        peaks = _peaks(events.get(flavor.pk, []), bounds)
        calendar.append(CalendarRow(flavor=flavor, cells=[
            CalendarCell(month=starts[index], peak=peak + pools.get(flavor.pk, 0), reserved=reserved.get((flavor.pk, index), 0))
            for index, peak in enumerate(peaks)]))
    return starts[:months], calendar


def flavor_guaranteed_totals() -> dict[int, int]:
    """Guaranteed units per flavor id now: every team's active grants and every department's pool,
    which capacity must hold alike."""
    grants = QuotaGrant.objects.active().order_by().values("flavor_id").annotate(units=Sum("units"))
    totals: dict[int, int] = defaultdict(int)
    for flavor_id, units in grants.values_list("flavor_id", "units").union(_pooled_by_flavor(), all=True):
        totals[flavor_id] += units or 0
    return dict(totals)


def department_pool_totals() -> dict[int, int]:
    """Units per flavor id that departments pool for their teams, summed over every department."""
    return dict(_pooled_by_flavor())


def _pooled_by_flavor() -> QuerySet[DepartmentPool, tuple[int, int]]:
    """(flavor id, units) of the pools in force, summed per flavor."""
    return DepartmentPool.objects.current().order_by().values("flavor_id").annotate(units=Sum("units")).values_list(
        "flavor_id", "units")


@dataclass(frozen=True)
class FlavorCapacity:
    flavor: Flavor
    capacity: int
    guaranteed: int
    team_guaranteed: int | None = None

    @property
    def free(self) -> int:
        return max(self.capacity - self.guaranteed, 0)

    @property
    def percent(self) -> int:
        return min(round(100 * self.guaranteed / self.capacity), 100) if self.capacity else 0

    @property
    def team_percent(self) -> int:
        if not self.capacity or not self.team_guaranteed:
            return 0
        return min(round(100 * self.team_guaranteed / self.capacity), 100)


def flavor_capacities(*, team: Team | None = None) -> list[FlavorCapacity]:
    totals = flavor_guaranteed_totals()
    mine = team_guarantees(team=team) if team else {}
    return [
        FlavorCapacity(
            flavor=flavor,
            capacity=flavor.capacity_units,
            guaranteed=totals.get(flavor.pk, 0),
            team_guaranteed=mine.get(flavor.pk, 0) if team else None,
        )
        for flavor in Flavor.objects.filter(is_active=True)
    ]


def quota_requests_with_lines(queryset: QuerySet[QuotaRequest]) -> QuerySet[QuotaRequest]:
    return queryset.select_related("team__department", "requester", "decided_by", "endorsed_by").prefetch_related(
        Prefetch("lines", queryset=QuotaRequestLine.objects.select_related("flavor"))
    )


def quota_requests_for_user(*, user: Any, status: str | None = None, team: Team | None = None) -> QuerySet[QuotaRequest]:
    requests = QuotaRequest.objects.for_user(user)
    if status:
        requests = requests.filter(status=status)
    if team is not None:
        requests = requests.filter(team=team)
    return quota_requests_with_lines(requests)


def approvals_inbox(*, user: Any) -> QuerySet[QuotaRequest]:
    """Pending requests this user may decide: their led teams' until a lead passes one to the
    department's head, those passed to them as a head, or every team's for an admin."""
    pending = QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING)
    if not is_platform_admin(user):
        led = [team_id for team_id, role in user_team_roles(user).items() if role == Membership.Role.LEAD]
        with_head = Q(endorsed_at__isnull=False, team__department__head_approves=True)
        pending = pending.filter((Q(team_id__in=led) & ~with_head) | (Q(team_id__in=sorted(headed_team_ids(user))) & with_head))
    return quota_requests_with_lines(pending).order_by("created_at", "id")


def teams_for_user(*, user: Any) -> QuerySet[Team]:
    return Team.objects.for_user(user).annotate(
        member_count=Count("memberships", distinct=True),
        pending_count=Count("quota_requests", filter=Q(quota_requests__status=QuotaRequest.Status.PENDING), distinct=True),
    ).order_by("name", "pk")


def team_members(*, team: Team) -> list[Membership]:
    """The team's members, leads first; where the team caps the GPUs each person holds, each with
    what their workloads hold in the cluster (`gpus_held`, as shown) and how many of theirs wait
    in the portal for the cap (`waiting_for_cap`), from jobs (`PERSON_GPUS`, two queries)."""
    members = list(team.memberships.select_related("user").order_by("-role", "user__username"))
    if person_gpu_cap(team=team) is not None:
        use = PERSON_GPUS.call(team=team)
        for membership in members:
            membership.gpus_held, membership.waiting_for_cap = use.get(membership.user_id, ("0", 0))  # type: ignore[attr-defined]
    return members


# Per user id of the team: (GPUs their workloads hold in the cluster, as shown; how many wait in
# the portal for the team's per-person cap). Jobs counts them (jobs.person_limits).
PERSON_GPUS = Hook[Callable[..., "dict[int, tuple[str, int]]"]]("tenants.selectors.PERSON_GPUS", by="jobs")


@dataclass(frozen=True)
class GrantPart:
    """Grants of one flavor that end together (or never), summed: "+2 through 2026-12-14"."""

    units: int
    last_day: Any  # dt.date | None: None is permanent
    request_ids: tuple[int, ...]
    renewable: tuple[int, ...] = ()  # the requests among them whose grants may be renewed now


@dataclass(frozen=True)
class GrantLine:
    """A team's active grants of one flavor: one line, however many approvals made it up."""

    flavor: Flavor
    units: int
    parts: tuple[GrantPart, ...]  # permanent first, then by end date
    since: Any  # the earliest grant's start


@dataclass(frozen=True)
class TeamGrants:
    """The team page's grants: running ones as lines per flavor, and those reserved for later, soonest first."""

    lines: list[GrantLine]
    reserved: list[QuotaGrant]


def team_grants(*, team: Team) -> TeamGrants:
    """Running and reserved grants of the team, read in one query."""
    now = timezone.now()
    running: list[QuotaGrant] = []
    reserved: list[QuotaGrant] = []
    for grant in (team.grants.filter(ended_at__isnull=True).filter(Q(valid_until__isnull=True) | Q(valid_until__gt=now))
                  .select_related("flavor", "request").order_by("flavor__name", "valid_until")):
        (running if grant.valid_from <= now else reserved).append(grant)
    reserved.sort(key=lambda grant: (grant.valid_from, grant.flavor.name))
    return TeamGrants(lines=_grant_lines(running), reserved=reserved)


def _grant_lines(grants_running: list[QuotaGrant]) -> list[GrantLine]:
    by_flavor: dict[int, list[QuotaGrant]] = defaultdict(list)
    for grant in grants_running:
        by_flavor[grant.flavor_id].append(grant)
    lines = []
    for grants in by_flavor.values():
        parts: dict[Any, list[QuotaGrant]] = defaultdict(list)
        for grant in grants:
            parts[grant.last_day].append(grant)
        ordered = sorted(parts.items(), key=lambda item: (item[0] is not None, item[0] or ""))
        lines.append(GrantLine(
            flavor=grants[0].flavor, units=sum(g.units for g in grants), since=min(g.valid_from for g in grants),
            parts=tuple(
                GrantPart(units=sum(g.units for g in same), last_day=day,
                          request_ids=tuple(sorted({g.request_id for g in same if g.request_id})),
                          renewable=tuple(sorted({g.request_id for g in same if g.request_id and g.in_renewal_window})))
                for day, same in ordered
            ),
        ))
    return lines


def audit_events_for_user(*, user: Any, team: Team | None = None) -> QuerySet[AuditEvent]:
    """Events of the user's teams (all teams for finance and admins) and their own; with a
    team, that team's trail, and nothing when the user may not see the team."""
    events = AuditEvent.objects.select_related("actor")
    if not getattr(user, "is_authenticated", False):
        return events.none()
    if team is not None:
        return events.filter(team_id=team.pk) if sees_all_teams(user) or team.pk in user_team_roles(user) else events.none()
    if sees_all_teams(user):
        return events
    return events.filter(Q(team_id__in=list(user_team_roles(user))) | Q(actor=user))


@dataclass(frozen=True)
class QuotaPreview:
    """What the request form shows as the user types: where this flavor stands for the team."""

    flavor: Flavor
    capacity: int
    guaranteed_all_teams: int
    team_guaranteed: int
    team_permanent: int
    units: int

    @property
    def free(self) -> int:
        return max(self.capacity - self.guaranteed_all_teams, 0)

    @property
    def team_after(self) -> int:
        return self.team_guaranteed + self.units

    @property
    def fits(self) -> bool:
        if self.units < 0:
            return self.team_permanent + self.units >= 0
        return self.units <= self.free


def quota_preview(*, team: Team, flavor: Flavor, units: int) -> QuotaPreview:
    guarantees = team_guarantees(team=team)
    permanent = team_guarantees(team=team, permanent_only=True)
    return QuotaPreview(
        flavor=flavor,
        capacity=flavor.capacity_units,
        guaranteed_all_teams=flavor_guaranteed_totals().get(flavor.pk, 0),
        team_guaranteed=guarantees.get(flavor.pk, 0),
        team_permanent=permanent.get(flavor.pk, 0),
        units=units,
    )


def renewable_grants(*, quota_request: QuotaRequest, lock: bool = False) -> QuerySet[QuotaGrant]:
    """The request's temporary grants still running: what a renewal of it would continue."""
    grants = QuotaGrant.objects.active().filter(request_id=quota_request.pk, valid_until__isnull=False)
    if lock:
        grants = grants.select_for_update(of=("self",))
    return grants.select_related("flavor").order_by("flavor__name", "pk")


def units_by_flavor(grants: Iterable[QuotaGrant]) -> dict[int, int]:
    """Units per flavor id of these grants (what a renewal continues, counted once)."""
    units: dict[int, int] = defaultdict(int)
    for grant in grants:
        units[grant.flavor_id] += grant.units
    return dict(units)


def renewable_units(*, request_ids: Iterable[int]) -> dict[tuple[int, int], int]:
    """Per (request id, flavor id), the request's temporary units still running, which a renewal
    of it would continue (`renewable_grants`, summed, for many requests in one query)."""
    rows = (QuotaGrant.objects.active().filter(request_id__in=list(request_ids), valid_until__isnull=False)
            .values("request_id", "flavor_id").annotate(units=Sum("units")))
    return {(row["request_id"], row["flavor_id"]): row["units"] for row in rows}


def grants_ending_between(*, start: Any, end: Any) -> QuerySet[QuotaGrant]:
    return QuotaGrant.objects.filter(ended_at__isnull=True, valid_until__gt=start, valid_until__lte=end)


def grants_past_end(*, now: Any = None) -> QuerySet[QuotaGrant]:
    return QuotaGrant.objects.filter(ended_at__isnull=True, valid_until__lte=now or timezone.now())


def team_leads(*, team_ids: list[int]) -> dict[int, list[Any]]:
    leads: dict[int, list[Any]] = defaultdict(list)
    for membership in Membership.objects.filter(team_id__in=team_ids, role=Membership.Role.LEAD).select_related("user"):
        leads[membership.team_id].append(membership.user)
    return leads


def department_heads(*, team: Team) -> list[Any]:
    """The heads of the team's department (none where it is in none), by name."""
    if team.department_id is None:
        return []
    return list(User.objects.filter(headed_departments=team.department_id).order_by("username"))


# --- Reads for the REST API (tenants/api.py) -------------------------------------------------


def memberships_for_user(*, user: Any) -> QuerySet[Membership]:
    """Memberships of every team the user can see."""
    return Membership.objects.filter(team__in=Team.objects.for_user(user)).select_related("team", "user")


def guarantee_rows_by_team(*, team_ids: list[int]) -> dict[int, list[tuple[Flavor, int]]]:
    """Each team's guaranteed units per flavor, by flavor name; two queries for any number of teams."""
    guarantees = guarantees_by_flavor(team_ids=team_ids)
    flavors = Flavor.objects.in_bulk({flavor_id for _, flavor_id in guarantees})
    rows: dict[int, list[tuple[Flavor, int]]] = defaultdict(list)
    for (team_id, flavor_id), units in guarantees.items():
        rows[team_id].append((flavors[flavor_id], units))
    return {team_id: sorted(team_rows, key=lambda row: row[0].name) for team_id, team_rows in rows.items()}


def flavor_capacity(*, flavor: Flavor, team: Team | None = None) -> FlavorCapacity:
    """Where one flavor stands, retired or not; with a team, also what that team holds of it."""
    return FlavorCapacity(
        flavor=flavor,
        capacity=flavor.capacity_units,
        guaranteed=flavor_guaranteed_totals().get(flavor.pk, 0),
        team_guaranteed=team_guarantees(team=team).get(flavor.pk, 0) if team else None,
    )


# --- What deleting a team takes, and what it leaves --------------------------------------------

# Apps to the right say, in sentences for the confirmation, what of theirs goes with a team (jobs:
# its workloads and templates) and what outlives it (billing: usage history and statements).
TeamContents = Callable[[Team], list[str]]
TEAM_RECORDS_GOING = Event[TeamContents]("tenants.selectors.TEAM_RECORDS_GOING", by="jobs")
TEAM_RECORDS_STAYING = Event[TeamContents]("tenants.selectors.TEAM_RECORDS_STAYING", by="billing")


# Which flavors have a price in force now (billing answers): nothing launches on one that has none,
# so the catalog says so beside each flavor an admin just added.
PricedFlavors = Callable[[Collection[int]], set[int]]
PRICED_FLAVORS = Hook[PricedFlavors]("tenants.selectors.PRICED_FLAVORS", by="billing")
