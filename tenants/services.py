"""Every write about teams and quota. Each checks who asks and the state it changes, runs in a
transaction, writes the audit event and notifications, and queues cluster work after commit."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import rules
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F, ProtectedError
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from portal.adapters import decimal_number
from portal.audit import audit_record
from portal.errors import DomainError, NotAllowed, StateConflict
from portal.kube import gateway
from portal.models import SsoIdentity, User
from portal.notifications import notifications_resolve, notify
from portal.tasks import send_on_commit
from portal.tokens import api_tokens_revoke_all
from tenants import catalog, selectors
from tenants.manifests import weight_quantity
from tenants.models import (
    GRANT_ENDING_NOTICE,
    WEIGHT_INVALID,
    WEIGHT_LIMIT,
    Department,
    DepartmentPool,
    Flavor,
    GpuNode,
    Membership,
    QuotaGrant,
    QuotaRequest,
    QuotaRequestLine,
    Team,
    forget_team_roles,
    user_team_roles,
)
from tenants.queueing import backend

log = logging.getLogger(__name__)

TEAM_FIELDS = ("name", "cost_center", "description", "person_gpu_limit", "person_share_percent")
PERSON_CAP_FIELDS = ("person_gpu_limit", "person_share_percent")  # a lead's: fairness inside the team
COST_CENTER_REFUSAL = ("Only finance and platform admins may change a team's cost center: the monthly statements "
                       "bill it. Ask finance to change it.")
# How the team shares the cluster: only a platform admin changes these.
POLICY_FIELDS = ("department", "may_borrow", "lends_idle", "fair_share_weight", "cpu_limit_cores", "memory_limit_gib",
                 "pod_limit", "storage_quota", "requires_second_approver")


def _require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied


def _on_team_change(team_id: int) -> None:
    """Everything that changes what a team should have in the cluster ends here: the team is
    "applying" until a reconcile that read this version has applied it."""
    Team.objects.filter(pk=team_id).update(config_version=F("config_version") + 1)
    send_on_commit("tenants.tasks.team_reconcile", team_id)


# --- Teams and memberships ------------------------------------------------------------------


@transaction.atomic
def team_create(*, actor: User, slug: str, name: str, cost_center: str = "", description: str = "", **policy: Any) -> Team:
    """A new team, with its sharing policy and backstops where given (the model's defaults otherwise)."""
    _require(actor.has_perm("tenants.manage_teams"))
    unknown = set(policy) - set(POLICY_FIELDS)
    if unknown:
        raise DomainError(f"These team fields cannot be set here: {', '.join(sorted(unknown))}.")
    team = Team(slug=slug.strip(), name=name.strip(), cost_center=cost_center.strip(), description=description.strip(),
                **policy)
    team.full_clean()
    _check_backend(team)
    team.save()
    audit_record(actor=actor, action="team.created", obj=team, team_id=team.pk,
                 data={field: str(getattr(team, field)) for field in POLICY_FIELDS},
                 message=f"{actor.username} created team {team.slug} ({team.name})")
    _on_team_change(team.pk)
    return team


@transaction.atomic
def team_update(*, actor: User, team: Team, **changes: Any) -> Team:
    """Leads change how their team is named and described and the GPUs each person may hold (its
    per-person limit), finance and platform admins its cost center, platform admins how it shares
    the cluster; each changed field is asked of its own rule."""
    _require(actor.has_perm("tenants.manage_members", team) or actor.has_perm("tenants.change_cost_center", team))
    unknown = set(changes) - set(TEAM_FIELDS) - set(POLICY_FIELDS)
    if unknown:
        raise DomainError(f"These team fields cannot be changed here: {', '.join(sorted(unknown))}.")
    if "person_gpu_limit" in changes:
        changes = {**changes, "person_gpu_limit": person_gpu_limit_input(changes["person_gpu_limit"])}
    if "person_share_percent" in changes:
        changes = {**changes, "person_share_percent": person_share_input(changes["person_share_percent"])}
    changed = {field: value for field, value in changes.items() if getattr(team, field) != value}
    if not changed:
        return team
    if "cost_center" in changed and not actor.has_perm("tenants.change_cost_center", team):
        raise NotAllowed(COST_CENTER_REFUSAL, field="cost_center")
    if {"name", "description", *PERSON_CAP_FIELDS} & set(changed):
        _require(actor.has_perm("tenants.manage_members", team))
    if set(changed) & set(POLICY_FIELDS):
        _require(actor.has_perm("tenants.manage_teams"))
    before = {field: getattr(team, field) for field in changed}
    for field, value in changed.items():
        setattr(team, field, value)
    team.full_clean()
    _check_backend(team)
    team.save(update_fields=list(changed))
    described = ", ".join(_change_described(field, before[field], value) for field, value in sorted(changed.items()))
    audit_record(actor=actor, action="team.updated", obj=team, team_id=team.pk, data={k: str(v) for k, v in changed.items()},
                 message=f"{actor.username} changed {described} of team {team.slug}")
    _on_team_change(team.pk)
    if set(PERSON_CAP_FIELDS) & set(changed):
        # Raised or lifted: work waiting for it may go now (jobs.person_limits).
        send_on_commit("jobs.tasks.person_limit_release", team.pk)
    return team


def departments_refused() -> str:
    """Why teams cannot be put in departments on this site's queue backend, or "" where they can."""
    if (queue := backend()).departments:
        return ""
    return (f"This site's queue backend, {queue.label}, has no department level the portal can drive (Kueue's "
            "cohorts with parents); teams cannot be put in departments here.")


def weights_refused() -> str:
    """Why fair-share weights other than 1 cannot be set on this site's queue backend, or "" where they can."""
    if (queue := backend()).fair_sharing:
        return ""
    return (f"This site's queue backend, {queue.label}, does not share idle quota by the portal's fair-share "
            "weights (Kueue's fair sharing); leave the weight at 1 here.")


def _check_backend(team: Team) -> None:
    """What the site's queue backend cannot do for the team is refused in words, not ignored."""
    if team.department_id is not None and (refusal := departments_refused()):
        raise DomainError(refusal, field="department")
    if team.fair_share_weight != 1 and (refusal := weights_refused()):
        raise DomainError(refusal, field="fair_share_weight")


DEPARTMENT_FIELDS = ("name", "slug", "borrowing_limit", "lending_limit", "fair_share_weight", "head_approves")


@transaction.atomic
def department_save(*, actor: User, department: Department, heads: Iterable[User] | None = None,
                    pool: Mapping[Flavor, int] | None = None) -> Department:
    """Creates or changes a department (with `heads`, who heads it now, and `pool`, the units of
    each GPU flavor it guarantees its teams together beyond their own: a flavor left out or at 0
    has none); its cohort and its teams' queues follow. Its slug names its cohort, so it is set once."""
    _require(actor.has_perm("tenants.manage_teams"))
    if refusal := departments_refused():
        raise DomainError(refusal)
    department.name, department.slug = department.name.strip(), department.slug.strip()
    department.full_clean()
    before = Department.objects.filter(pk=department.pk).first() if department.pk else None
    if before is not None and before.slug != department.slug:
        raise DomainError(f"A department's slug names its cohort and cannot change ({before.slug}); make a new "
                          "department and move its teams instead.", field="slug")
    had = sorted(before.heads.values_list("username", flat=True)) if before else []
    people = sorted({user.username: user for user in heads}.values(), key=lambda u: u.username) if heads is not None else None
    now_heads = [user.username for user in people] if people is not None else had
    if department.head_approves and not now_heads:
        raise DomainError("Two approval levels need a head to decide after the lead: name at least one.", field="heads")
    pooled = {row.flavor: row.units for row in before.pool_in_force()} if before else {}
    wanted = {flavor: units for flavor, units in pool.items() if units} if pool is not None else pooled
    changes = {name: (getattr(before, name) if before else None, getattr(department, name)) for name in DEPARTMENT_FIELDS
               if before is None or getattr(before, name) != getattr(department, name)}
    if now_heads != had:
        changes["heads"] = (", ".join(had), ", ".join(now_heads) or "nobody")
    if wanted != pooled:
        _check_pool(department, wanted, pooled)
        changes["pool"] = (_pool_words(pooled), _pool_words(wanted))
    if before is not None and not changes:
        return department
    department.save()
    if people is not None:
        department.heads.set(people)
    if wanted != pooled:
        _pool_change(department, wanted, pooled)
    audit_record(actor=actor, action="department.created" if before is None else "department.updated", obj=department,
                 data={name: [str(old), str(new)] for name, (old, new) in changes.items()},
                 message=f"{actor.username} {'created' if before is None else 'changed'} department {department.slug}: "
                 + "; ".join(f"{name.replace('_', ' ')} {_limit_words(new)}" for name, (_, new) in changes.items()))
    send_on_commit("tenants.tasks.platform_reconcile")
    return department


def department_heads_input(names: Iterable[str]) -> list[User]:
    """The people named (usernames, as the department form and the API give them) to head a
    department, or a refusal naming those who are not active users of the portal."""
    wanted = {name.strip() for name in names if name.strip()}
    found = {user.username: user for user in User.objects.filter(username__in=wanted, is_active=True)}
    if missing := sorted(wanted - found.keys()):
        raise DomainError(f"No active user is called {', '.join(f'“{name}”' for name in missing)}: name heads by their "
                          "usernames.", field="heads")
    return sorted(found.values(), key=lambda user: user.username)


def _check_pool(department: Department, wanted: Mapping[Flavor, int], pooled: Mapping[Flavor, int]) -> None:
    """A pool is a guarantee: only of an active GPU flavor, and only what the flavor's capacity
    holds beside everything else promised of it for good (teams' grants, reservations to come and
    the other departments' pools). Flavors locked, as an approval locks them, so the two cannot
    overcommit a flavor between them."""
    for flavor, units in wanted.items():
        if units < 0:
            raise DomainError(f"A pool of {flavor.name} is a whole number of units, 0 or more; not {units}.", field="pool")
        if units > pooled.get(flavor, 0) and (not flavor.is_active or flavor.is_cpu):
            raise DomainError(f"{flavor.name} is {'retired' if not flavor.is_active else 'CPU only, which no queue lends'};"
                              " a department pools active GPU flavors only.", field="pool")
    grown = {flavor.pk: units for flavor, units in wanted.items() if units > pooled.get(flavor, 0)}
    now = timezone.now()
    for flavor in Flavor.objects.select_for_update().filter(pk__in=list(grown)).order_by("pk"):
        units = grown[flavor.pk]
        held = selectors.committed_peak(flavor_id=flavor.pk, start=now, end=None, pools_excluding=department.pk)
        if held + units > flavor.capacity_units:
            raise DomainError(
                f"{flavor.name} has {flavor.capacity_units} units and teams and departments are promised up to {held} of "
                f"them (reservations included); a pool of {units} would make {held + units}, so it can be at most "
                f"{max(flavor.capacity_units - held, 0)}.", field="pool")


def _pool_change(department: Department, wanted: Mapping[Flavor, int], pooled: Mapping[Flavor, int]) -> None:
    """Ends the rows of the flavors whose pool changes and starts the new ones at the same moment:
    metering reads what was pooled in every hour from them."""
    now = timezone.now()
    changed = [flavor for flavor in {*wanted, *pooled} if wanted.get(flavor, 0) != pooled.get(flavor, 0)]
    DepartmentPool.objects.current().filter(department=department, flavor__in=changed).update(ended_at=now)
    DepartmentPool.objects.bulk_create([DepartmentPool(department=department, flavor=flavor, units=wanted[flavor],
                                                       valid_from=now) for flavor in changed if wanted.get(flavor, 0)])


def _pool_words(pool: Mapping[Flavor, int]) -> str:
    return " · ".join(f"{units} × {flavor.name}" for flavor, units in sorted(pool.items(), key=lambda p: p[0].name)) or "none"


def department_pool_input(entries: Mapping[str, Any]) -> dict[Flavor, int]:
    """A pool as the API gives it ({flavor slug: units}), or a refusal naming what is wrong."""
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.filter(slug__in=list(entries))}
    if missing := sorted(set(entries) - flavors.keys()):
        raise DomainError(f"No flavor is called {', '.join(f'“{slug}”' for slug in missing)}: name flavors by their "
                          "slugs.", field="pool")
    pool = {}
    for slug, units in entries.items():
        if isinstance(units, bool) or not isinstance(units, int) or units < 0:
            raise DomainError(f"{slug}: the units are a whole number, 0 or more, e.g. 4; not “{units}”.", field="pool")
        pool[flavors[slug]] = units
    return pool


def _limit_words(value: Any) -> str:
    if isinstance(value, Decimal):  # a weight, written as everywhere else: "0.5", not "0.50"
        return weight_quantity(value)
    if isinstance(value, bool):  # two approval levels
        return "on" if value else "off"
    return "no limit" if value is None else str(value)


@transaction.atomic
def department_delete(*, actor: User, department: Department) -> None:
    """Removes an empty department, ending its pool (whose rows metering keeps reading); the
    periodic pass prunes its cohort."""
    _require(actor.has_perm("tenants.manage_teams"))
    pooled = {row.flavor: row.units for row in department.pool_in_force()}
    audit_record(actor=actor, action="department.deleted", obj=department,
                 message=f"{actor.username} deleted department {department.slug}"
                 + (f"; its pool of {_pool_words(pooled)} is free again" if pooled else ""))
    try:
        _pool_change(department, {}, pooled)
        department.delete()  # PROTECT: refused while a team is in it, whenever it was put there
    except ProtectedError:  # the audit event goes with the transaction
        teams = list(department.teams.order_by("slug").values_list("slug", flat=True)[:6])
        raise StateConflict(f"Department {department.name} still holds {', '.join(teams[:5])}"
                            f"{' and more' if len(teams) > 5 else ''}; move its teams out first.") from None


PERSON_GPU_LIMIT_MOST = Decimal("99999.99")


def person_gpu_limit_input(value: Any) -> Decimal | None:
    """GPUs per person as typed ("4", "1.5"; empty for no limit), or a refusal in words."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = format(value, "f") if isinstance(value, Decimal) else str(value)
    number = decimal_number(text)
    if number is None:
        raise DomainError(f"“{text.strip()[:20]}” is not a number of GPUs; give one such as 4 or 1.5, or leave it empty "
                          "for no limit.", field="person_gpu_limit")
    if not 0 < number <= PERSON_GPU_LIMIT_MOST:
        raise DomainError(f"GPUs per person is more than 0 and at most {PERSON_GPU_LIMIT_MOST:,}; leave it empty for no "
                          "limit.", field="person_gpu_limit")
    if number != number.quantize(Decimal("0.01")):
        raise DomainError("GPUs per person has at most 2 decimals (a slice of 1/7 is 0.14).", field="person_gpu_limit")
    return number.quantize(Decimal("0.01"))


def fair_share_weight_input(value: Any) -> Decimal:
    """A fair-share weight as typed or sent ("3", "0.5"), read in ASCII digits as every number typed
    here is, or a refusal in words: the one rule behind the pages, the API and the Django admin."""
    text = format(value, "f") if isinstance(value, Decimal) else str(value).strip()
    number = decimal_number(text) if not isinstance(value, bool) else None
    if number is None or not 0 <= number <= WEIGHT_LIMIT or number != number.quantize(Decimal("0.01")):
        raise DomainError(f"“{text[:20]}” is not a weight: {WEIGHT_INVALID}", field="fair_share_weight")
    return number.quantize(Decimal("0.01"))


def person_share_input(value: Any) -> int | None:
    """A share of the team's guarantee per person, in whole percent ("25"; empty for none), or a refusal."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip().removesuffix("%").strip()
    number = decimal_number(text)
    if number is None or number != number.to_integral_value():
        raise DomainError(f"“{str(value).strip()[:20]}” is not a whole percent; give one such as 25, or leave it empty "
                          "for none.", field="person_share_percent")
    if not 1 <= number <= 100:
        raise DomainError("A share of the guarantee per person is from 1 to 100 %; leave it empty for none.",
                          field="person_share_percent")
    return int(number)


def _change_described(field: str, before: Any, after: Any) -> str:
    if field == "cost_center":  # what statements billed until now, for whoever reconciles them
        return f"cost_center from {before or '(none)'} to {after or '(none)'}"
    if field == "person_gpu_limit":
        return f"GPUs per person to {after if after is not None else 'no limit'}"
    if field == "department":
        return f"the department to {after}" if after is not None else "the department to none"
    if field == "person_share_percent":
        return f"the share of the guarantee per person to {f'{after} %' if after is not None else 'none'}"
    if field == "fair_share_weight":
        return f"the fair-share weight from {weight_quantity(before)} to {weight_quantity(after)}"
    return f"{field} to {after}" if field in POLICY_FIELDS else field


def user_activity_changed(*, user: User) -> None:
    """A user was deactivated or reactivated: the teams they belong to bind them (or no longer)
    in the cluster. Called wherever an account's is_active changes, which today is only a save
    of the User (the admin, the shell, single sign-on), so a signal calls it."""
    for team_id in Membership.objects.filter(user=user).values_list("team_id", flat=True):
        _on_team_change(team_id)


@transaction.atomic
def team_delete(*, actor: User, team: Team) -> None:
    """Deletes the team; its cluster objects (and the workloads in them) go after commit."""
    _require(actor.has_perm("tenants.manage_teams"))
    slug, uid = team.slug, str(team.uid)
    audit_record(actor=actor, action="team.deleted", obj=team, team_id=team.pk,
                 message=f"{actor.username} deleted team {slug} and its namespace")
    team.delete()
    send_on_commit("tenants.tasks.team_teardown", slug, uid)


def _last_lead(membership: Membership) -> bool:
    return (
        membership.role == Membership.Role.LEAD
        and not Membership.objects.filter(team_id=membership.team_id, role=Membership.Role.LEAD)
        .exclude(pk=membership.pk)
        .exists()
    )


@transaction.atomic
def membership_add(*, actor: User, team: Team, user: User, role: str = Membership.Role.MEMBER) -> Membership:
    _require(actor.has_perm("tenants.manage_members", team))
    if role not in Membership.Role.values:
        raise DomainError(f"“{role}” is not a role; choose member or lead.", field="role")
    if not user.is_active:
        raise DomainError(no_account_to_add(user.username), field="user")
    if Membership.objects.filter(team=team, user=user).exists():
        raise DomainError(f"{user.username} is already in {team.slug}.", field="user")
    membership = Membership.objects.create(team=team, user=user, role=role)
    forget_team_roles(user)
    audit_record(actor=actor, action="membership.added", obj=membership, team_id=team.pk,
                 message=f"{actor.username} added {user.username} to {team.slug} as {membership.get_role_display().lower()}")
    notify(recipients=[user], message=f"{actor.username} added you to team {team.name}.",
           url=reverse("tenants:team-detail", args=[team.slug]))
    _on_team_change(team.pk)
    return membership


def no_account_to_add(username: str) -> str:
    """The one answer for a username that names nobody who can join a team.

    Unknown and deactivated accounts get the same sentence, and only someone who may manage the
    team's members ever sees it: adding a member is a lead's job and needs a yes or no, but no one
    else should learn from the portal who has an account (issue 8, finding 15)."""
    return f"There is no active account “{username}” you can add; people appear after their first login."


def membership_add_by_username(*, actor: User, team: Team, username: str, role: str = Membership.Role.MEMBER) -> Membership:
    """membership_add for a person named by username: whether the actor may add members is
    asked before the name is looked up, so the answer about the name goes only to them."""
    _require(actor.has_perm("tenants.manage_members", team))
    user = User.objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise DomainError(no_account_to_add(username.strip()), field="username")
    return membership_add(actor=actor, team=team, user=user, role=role)


@transaction.atomic
def membership_set_role(*, actor: User, membership: Membership, role: str) -> Membership:
    _require(actor.has_perm("tenants.manage_members", membership.team))
    if role not in Membership.Role.values:
        raise DomainError(f"“{role}” is not a role; choose member or lead.", field="role")
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.role == role:
        return membership
    if _last_lead(membership):
        raise DomainError(f"{membership.user.username} is the only lead of {membership.team.slug}; make someone else lead first.")
    membership.role = role
    membership.save(update_fields=["role"])
    # The actor may be the same person through another object (a lead demoting themselves).
    forget_team_roles(membership.user)
    forget_team_roles(actor)
    audit_record(actor=actor, action="membership.role_changed", obj=membership, team_id=membership.team_id,
                 message=f"{actor.username} made {membership.user.username} {membership.get_role_display().lower()}"
                 f" of {membership.team.slug}")
    _on_team_change(membership.team_id)
    return membership


@transaction.atomic
def membership_remove(*, actor: User, membership: Membership) -> None:
    _require(actor.has_perm("tenants.manage_members", membership.team))
    if _last_lead(membership):
        raise DomainError(f"{membership.user.username} is the only lead of {membership.team.slug}; make someone else lead first.")
    team, user = membership.team, membership.user
    audit_record(actor=actor, action="membership.removed", obj=membership, team_id=team.pk,
                 message=f"{actor.username} removed {user.username} from {team.slug}")
    membership.delete()
    forget_team_roles(user)
    forget_team_roles(actor)
    _on_team_change(team.pk)


# --- Flavors --------------------------------------------------------------------------------

# What an update's audit event lists when it changes (capacity above all: it bounds every guarantee).
FLAVOR_AUDITED = ("capacity_units", "name", "resource_name", "sharing_mode", "gpu_model", "fraction_numerator",
                  "fraction_denominator", "resource_per_unit", "memory_gib_per_unit", "extra_resources", "device_class_name",
                  "node_labels",
                  "tolerations", "runtime_class_name", "is_active")


# The field manager of a cordon: server-side apply then owns spec.unschedulable alone, and the
# node's other fields (its taints, its labels) stay their owners'.
CORDON_FIELD_MANAGER = "gpu-portal-cordon"


@transaction.atomic
def node_cordon(*, actor: User, node: GpuNode, cordoned: bool) -> GpuNode:
    """Cordons a node (nothing new starts on it; what runs there goes on) or makes it schedulable
    again, as `kubectl cordon` does: only the node's spec.unschedulable is written. Audited."""
    _require(actor.has_perm("tenants.manage_flavors"))
    gateway().apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name},
                     "spec": {"unschedulable": cordoned}}, field_manager=CORDON_FIELD_MANAGER)
    GpuNode.objects.filter(pk=node.pk).update(cordoned=cordoned)
    node.cordoned = cordoned
    audit_record(actor=actor, action="node.cordoned" if cordoned else "node.uncordoned", obj=node,
                 message=f"{actor.username} {'cordoned' if cordoned else 'made schedulable again'} node {node.name}")
    return node


@transaction.atomic
def flavor_save(*, actor: User, flavor: Flavor) -> Flavor:
    """Creates or updates a flavor. Capacity may not drop below what teams are guaranteed."""
    _require(actor.has_perm("tenants.manage_flavors"))
    return _flavor_store(flavor, actor=actor)


def _flavor_store(flavor: Flavor, *, actor: User | None) -> Flavor:
    """flavor_save's work, for a person (actor) or the install's catalog file (None)."""
    flavor.full_clean()
    _check_told_apart(flavor)
    created = flavor.pk is None
    if not created:
        stored_slug = Flavor.objects.filter(pk=flavor.pk).values_list("slug", flat=True).first()
        if stored_slug != flavor.slug:
            raise DomainError(
                f"A flavor's slug names its Kueue ResourceFlavor and cannot change ({stored_slug}); "
                "add a new flavor and retire this one instead.",
                field="slug",
            )
        guaranteed = selectors.flavor_guaranteed_totals().get(flavor.pk, 0)
        if flavor.capacity_units < guaranteed:
            pooled = selectors.department_pool_totals().get(flavor.pk, 0)
            raise DomainError(
                f"{flavor.name}: teams are guaranteed {guaranteed - pooled} units"
                f"{f' and departments pool {pooled}' if pooled else ''}, so capacity cannot drop to "
                f"{flavor.capacity_units}. Lower their {'grants and pools' if pooled else 'grants'} first.",
                field="capacity_units",
            )
        before = Flavor.objects.get(pk=flavor.pk)
        changes = {name: (getattr(before, name), getattr(flavor, name)) for name in FLAVOR_AUDITED
                   if getattr(before, name) != getattr(flavor, name)}
    else:
        changes = {}
    flavor.save()
    described = "; ".join(f"{name} {old} → {new}" for name, (old, new) in changes.items())
    audit_record(actor=actor, action="flavor.created" if created else "flavor.updated", obj=flavor,
                 data={name: [str(old), str(new)] for name, (old, new) in changes.items()},
                 message=f"{actor.username if actor else 'The catalog file'} {'added' if created else 'updated'} "
                 f"flavor {flavor.name} "
                 f"({flavor.capacity_units} × {flavor.resource_name}){': ' + described if described else ''}")
    # Every team's queue lists every flavor, so a flavor change reaches all of them.
    send_on_commit("tenants.tasks.platform_reconcile")
    for team_id in Team.objects.values_list("pk", flat=True):
        _on_team_change(team_id)
    return flavor


def _check_told_apart(flavor: Flavor) -> None:
    """Two active flavors of one resource name must be told apart by their nodes' labels: a launch
    holds its pods to its flavor by those labels (a node selector), and where one flavor's labels
    are all among another's, pods of the first also fit the second's nodes, so Kueue could admit a
    launch on the flavor it did not name."""
    if not flavor.is_active:
        return
    mine = set(flavor.node_labels.items())
    for other in Flavor.objects.filter(is_active=True, resource_name=flavor.resource_name).exclude(pk=flavor.pk):
        theirs = set(other.node_labels.items())
        if mine <= theirs or theirs <= mine:
            raise DomainError(
                f"{flavor.name} and {other.name} both give {flavor.resource_name}, and the node labels of one are all "
                f"among the other's, so a launch on one could run on the other's nodes. Give each the labels that only "
                "its own nodes carry (for example nvidia.com/gpu.product).", field="node_labels")


CATALOG_FIELDS = ("preset", "slug", "name", "resource_name", "sharing_mode", "gpu_model", "fraction", "capacity_units",
                  "resource_per_unit", "memory_gib_per_unit", "extra_resources", "device_class_name", "node_labels",
                  "tolerations", "runtime_class_name", "is_active")


@transaction.atomic
def catalog_apply(*, entries: Any) -> list[str]:
    """Makes the catalog hold the flavors an install declares (the chart's `catalog` value): each
    entry is created, or updated by its slug, through the same checks and audit as the catalog page;
    flavors the file does not name are left alone. Each entry may start from a preset
    (tenants.catalog) and set any field over it. All or nothing: one bad entry refuses the whole
    file, naming it. Returns one line per flavor saying what was done."""
    if not isinstance(entries, list):
        raise DomainError("The catalog must be a list of flavors.")
    done = []
    for number, entry in enumerate(entries, start=1):
        where = f"Catalog entry {number}"
        fields = _catalog_entry_fields(entry, where=where)
        slug = fields["slug"]
        flavor = Flavor.objects.filter(slug=slug).first() or Flavor(slug=slug)
        for key, value in fields.items():
            setattr(flavor, key, value)
        created = flavor.pk is None
        try:
            _flavor_store(flavor, actor=None)
        except ValidationError as invalid:
            problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in invalid.message_dict.items())
            raise DomainError(f"{where} ({slug}): {problems}") from None
        except DomainError as refusal:
            raise DomainError(f"{where} ({slug}): {refusal.message}") from None
        done.append(f"{'added' if created else 'updated'} {flavor.slug}: {flavor.capacity_units} × {flavor.resource_name}")
    return done


def _catalog_entry_fields(entry: Any, *, where: str) -> dict[str, Any]:
    """A catalog entry's flavor fields: its preset's, then its own over them, the fraction as two numbers."""
    if not isinstance(entry, dict):
        raise DomainError(f"{where} must be a mapping of a flavor's fields, not {type(entry).__name__}.")
    unknown = sorted(set(entry) - set(CATALOG_FIELDS))
    if unknown:
        raise DomainError(f"{where} has fields a flavor does not: {', '.join(unknown)} "
                          f"(it may have: {', '.join(CATALOG_FIELDS)}).")
    fields: dict[str, Any] = {}
    if "preset" in entry:
        preset = catalog.PRESETS_BY_KEY.get(str(entry["preset"]))
        if preset is None:
            raise DomainError(f"{where}: there is no preset “{entry['preset']}” (there are: "
                              f"{', '.join(catalog.PRESETS_BY_KEY)}).")
        fields.update(preset.form_initial())
    fields.update({key: value for key, value in entry.items() if key not in ("preset", "fraction")})
    if "fraction" in entry:
        try:
            fraction = Fraction(str(entry["fraction"]))
        except (ValueError, ZeroDivisionError):
            raise DomainError(f"{where}: fraction “{entry['fraction']}” is not a fraction such as 1/7.") from None
        fields.update(fraction_numerator=fraction.numerator, fraction_denominator=fraction.denominator)
    if not fields.get("slug") or "capacity_units" not in fields:
        raise DomainError(f"{where} needs a slug and capacity_units (and, without a preset, every field of a flavor).")
    return fields


# --- Quota requests -------------------------------------------------------------------------


@dataclass(frozen=True)
class LineInput:
    flavor: Flavor
    units: int


def describe_lines(lines: Iterable[Any]) -> str:
    return ", ".join(f"{line.units:+d} {line.flavor.name}" for line in lines)


def _describe_approved(lines: Sequence[QuotaRequestLine]) -> str:
    """"+2 H100 (of +4 asked), +1 L4": what was granted, saying so where it is less than asked."""
    return ", ".join(
        f"{line.approved_units:+d} {line.flavor.name}"
        + (f" (of {line.units:+d} asked)" if line.approved_units != line.units else "")
        for line in lines if line.approved_units is not None
    )


def _until(ends_on: dt.date | None) -> str:
    return f" through {ends_on.isoformat()}" if ends_on else ""


def _from(starts_on: dt.date | None) -> str:
    return f" from {starts_on.isoformat()}" if starts_on else ""


def _start_of_day(day: dt.date) -> dt.datetime:
    """Reserved quota starts with its first day, in the site's time zone."""
    return dt.datetime.combine(day, dt.time.min, tzinfo=ZoneInfo(settings.TIME_ZONE))


def _end_of_day(day: dt.date) -> dt.datetime:
    """Temporary quota lasts through its last day, in the site's time zone."""
    zone = ZoneInfo(settings.TIME_ZONE)
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time.min, tzinfo=zone)


def _check_lines(*, team: Team, lines: Sequence[LineInput], ends_on: dt.date | None,
                 replaced: dict[int, int] | None = None) -> None:
    """`replaced`: units per flavor id that approving would end (the grants a renewal continues)."""
    replaced = replaced or {}
    if not lines:
        raise DomainError("Add at least one flavor with a number of units.", field="lines")
    seen: set[int] = set()
    for line in lines:
        if line.flavor.pk in seen:
            raise DomainError(f"{line.flavor.name} appears twice; put all its units on one line.", field="lines")
        seen.add(line.flavor.pk)
        if line.units == 0:
            raise DomainError(f"{line.flavor.name}: ask for a number of units other than 0.", field="lines")
        if not line.flavor.is_active:
            raise DomainError(f"{line.flavor.name} is retired and cannot be requested.", field="lines")
        if ends_on and line.units < 0:
            raise DomainError("Quota can only be lowered permanently; leave the end date empty to give units back.",
                              field="ends_on")
    preview_for = {line.flavor.pk: selectors.quota_preview(team=team, flavor=line.flavor, units=line.units) for line in lines}
    for line in lines:
        preview = preview_for[line.flavor.pk]
        if line.units < 0 and not preview.fits:
            raise DomainError(
                f"{line.flavor.name}: {team.slug} holds {preview.team_permanent} permanent units, "
                f"so it can give back at most {preview.team_permanent}; temporary grants end on their own.",
                field="lines",
            )
        kept = preview.team_guaranteed - replaced.get(line.flavor.pk, 0)
        if line.units > 0 and kept + line.units > preview.capacity:
            raise DomainError(
                f"{line.flavor.name}: the cluster has {preview.capacity} units in all and {team.slug} already holds "
                f"{kept}{' besides what it renews' if replaced.get(line.flavor.pk) else ''}, "
                f"so at most {preview.capacity - kept} more can ever be granted.",
                field="lines",
            )


def _renewal_check(*, team: Team, renews: QuotaRequest, ends_on: dt.date | None) -> dict[int, int]:
    """The units per flavor id the renewal would continue; refuses what cannot be renewed."""
    if renews.team_id != team.pk:
        raise DomainError(f"Request #{renews.pk} is for another team; a renewal is filed for the same team.",
                          field="renews")
    running = selectors.renewable_grants(quota_request=renews)
    if renews.status != QuotaRequest.Status.APPROVED or not running:
        raise DomainError(f"Request #{renews.pk} has no temporary quota still running, so there is nothing to renew; "
                          "file a new request instead.", field="renews")
    if ends_on is None:
        raise DomainError("A renewal needs a new end date: renewed quota stays temporary.", field="ends_on")
    if renews.ends_on is not None and ends_on <= renews.ends_on:
        raise DomainError(f"The new end date must be after {renews.ends_on.isoformat()}, when request #{renews.pk} ends.",
                          field="ends_on")
    return selectors.units_by_flavor(running)


def _check_reservation(*, starts_on: dt.date | None, ends_on: dt.date | None, renews: QuotaRequest | None,
                       lines: Sequence[LineInput]) -> None:
    """A reservation starts on a later day, ends on or after it, and adds quota."""
    if starts_on is None:
        return
    if starts_on <= timezone.localdate():
        raise DomainError("A reservation starts on a later day; leave the start empty for quota from approval.",
                          field="starts_on")
    if ends_on is not None and ends_on < starts_on:
        raise DomainError(f"The last day ({ends_on.isoformat()}) is before the first ({starts_on.isoformat()}).",
                          field="ends_on")
    if renews is not None:
        raise DomainError("A renewal continues quota without a gap, so it has no start of its own.", field="starts_on")
    if any(line.units < 0 for line in lines):
        raise DomainError("Units are given back from now; leave the start empty to give them back.", field="starts_on")


def _renewing(renews_id: int | None) -> str:
    return f", renewing request #{renews_id}" if renews_id else ""


@transaction.atomic
def quota_request_create(
    *, requester: User, team: Team, lines: Sequence[LineInput], justification: str, ends_on: dt.date | None = None,
    renews: QuotaRequest | None = None, starts_on: dt.date | None = None,
) -> QuotaRequest:
    """Files a request; with `renews`, a renewal of that request's temporary grants (same team,
    a later end date); with `starts_on`, a reservation of quota for a later window. Each is
    decided like any other request."""
    _require(requester.has_perm("tenants.request_quota", team))
    justification = justification.strip()
    if not justification:
        raise DomainError("Say why the team needs this: the lead decides on it.", field="justification")
    if ends_on is not None and ends_on <= timezone.localdate():
        raise DomainError("The end date must be after today.", field="ends_on")
    _check_reservation(starts_on=starts_on, ends_on=ends_on, renews=renews, lines=lines)
    replaced = _renewal_check(team=team, renews=renews, ends_on=ends_on) if renews is not None else {}
    _check_lines(team=team, lines=lines, ends_on=ends_on, replaced=replaced)
    quota_request = QuotaRequest.objects.create(team=team, requester=requester, justification=justification, ends_on=ends_on,
                                                renews=renews, starts_on=starts_on)
    # In a department with two levels a lead's own request has the team's level done: it goes to a head.
    department = quota_request.head_department
    lead_files = department is not None and user_team_roles(requester).get(team.pk) == Membership.Role.LEAD
    if lead_files:
        quota_request.endorsed_by, quota_request.endorsed_at = requester, quota_request.created_at
        quota_request.save(update_fields=["endorsed_by", "endorsed_at"])
    QuotaRequestLine.objects.bulk_create(
        [QuotaRequestLine(request=quota_request, flavor=line.flavor, units=line.units,
                          endorsed_units=line.units if lead_files else None) for line in lines]
    )
    summary = f"{describe_lines(lines)} for {team.slug}{_from(starts_on)}{_until(ends_on)}{_renewing(quota_request.renews_id)}"
    audit_record(actor=requester, action="quota_request.created", obj=quota_request, team_id=team.pk,
                 message=f"{requester.username} requested {summary} (request #{quota_request.pk})")
    deciders = (selectors.department_heads(team=team) if lead_files else selectors.team_leads(team_ids=[team.pk])[team.pk])
    notify(recipients=[person for person in deciders if person.pk != requester.pk],
           message=f"{requester.username} asks for {summary} (request #{quota_request.pk})"
                   + (f"; as head of {department.name}, you decide." if department and lead_files else "."),
           url=_asks_url(quota_request))
    return quota_request


def _asks_url(quota_request: QuotaRequest) -> str:
    """Where the deciders' notification of a request leads: its row in the inbox. One address
    per request, so deciding it marks those notifications read (`_decided`)."""
    return f"{reverse('tenants:approvals')}#approval-{quota_request.pk}"


def _decided(quota_request: QuotaRequest, *, by: User, message: str) -> None:
    """A request left the inbox: the deciders' notifications of it are read, and the requester
    hears of it unless they decided it themselves."""
    notifications_resolve(url=_asks_url(quota_request))
    if quota_request.requester_id != by.pk:
        notify(recipients=[quota_request.requester], message=message,
               url=reverse("tenants:quota-request-detail", args=[quota_request.pk]))


def _locked_pending(quota_request: QuotaRequest, verb: str) -> QuotaRequest:
    locked = QuotaRequest.objects.select_for_update(of=("self",)).select_related("team", "requester").get(pk=quota_request.pk)
    if locked.status != QuotaRequest.Status.PENDING:
        raise StateConflict(
            f"Request #{locked.pk} is {locked.get_status_display().lower()}; only a pending request can be {verb}."
        )
    return locked


def _sync_caller_copy(original: QuotaRequest, locked: QuotaRequest) -> QuotaRequest:
    for field in ("status", "decided_by_id", "decided_at", "decision_note", "endorsed_by_id", "endorsed_at",
                  "endorsement_note"):
        setattr(original, field, getattr(locked, field))
    return locked


def _approved_units(lines: Sequence[QuotaRequestLine], units: Mapping[int, int] | None, pk: int) -> None:
    """Sets each line's `approved_units`: as asked (or as a lead passed it on to the head), or
    fewer where the approver said so (keyed by flavor id). Only an addition may be cut, to at
    least one unit; giving back is taken as asked."""
    asked = {line.flavor_id: line for line in lines}
    for flavor_id in (units or {}):
        if flavor_id not in asked:
            raise DomainError(f"Request #{pk} has no line for flavor {flavor_id}; approve only the flavors it asks for.",
                              field="units")
    for line in lines:
        given = (units or {}).get(line.flavor_id, line.grantable)
        if given != line.units and line.units < 0:
            raise DomainError(f"{line.flavor.name}: giving back {-line.units} units is approved as asked or rejected.",
                              field="units")
        if line.units > 0 and not 1 <= given <= line.grantable:
            most = (f"the {line.units} units asked" if line.grantable == line.units
                    else f"the {line.grantable} of {line.units} units a lead approved")
            raise DomainError(f"{line.flavor.name}: approve between 1 and {most}, or reject.", field="units")
        line.approved_units = given


@transaction.atomic
def quota_request_approve(
    *, quota_request: QuotaRequest, approver: User, note: str = "", units: Mapping[int, int] | None = None
) -> QuotaRequest:
    """Approves the request, each line in full or, where `units` (flavor id to units) says so,
    fewer than asked: a lead may grant part of what fits rather than refuse it all."""
    _may_decide(approver, quota_request)
    locked = _locked_pending(quota_request, "approved")
    # Asked of the locked row: its team's policy as it stands now, not as the caller loaded it.
    if not approver.has_perm("tenants.approve_quotarequest", locked):
        raise NotAllowed(locked.second_approver_sentence)
    lines = list(locked.lines.select_related("flavor"))
    _approved_units(lines, units, locked.pk)
    now = timezone.now()
    replaced_grants = _room_checked(locked, lines, window=_window(locked, now=now))
    if (department := locked.head_department) and _passes_to_head(locked, approver):
        _endorse(locked, lines, department, by=approver, note=note, now=now)
        return _sync_caller_copy(quota_request, locked)
    _grants_replace(replaced_grants, renewal=locked, now=now, actor=approver)
    _grants_start(locked, lines, now=now)
    QuotaRequestLine.objects.bulk_update(lines, ["approved_units"])
    locked.status = QuotaRequest.Status.APPROVED
    locked.decided_by, locked.decided_at, locked.decision_note = approver, now, note.strip()
    locked.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    summary = (f"{_describe_approved(lines)} for {locked.team.slug}{_from(locked.starts_on)}{_until(locked.ends_on)}"
               f"{_renewing(locked.renews_id)}")
    cut = {line.flavor.slug: {"asked": line.units, "approved": line.approved_units}
           for line in lines if line.approved_units != line.units}
    audit_record(actor=approver, action="quota_request.approved", obj=locked, team_id=locked.team_id,
                 data={"note": locked.decision_note, **({"fewer_than_asked": cut} if cut else {})},
                 message=f"{approver.username} approved request #{locked.pk}: {summary}")
    _decided(locked, by=approver, message=f"{approver.username} approved your request #{locked.pk}: {summary}."
             + (f" Note: {locked.decision_note}" if locked.decision_note else ""))
    _on_team_change(locked.team_id)
    return _sync_caller_copy(quota_request, locked)


def _may_decide(user: User, quota_request: QuotaRequest) -> None:
    """Refuses whoever may not decide the request; a lead of its team, once a lead passed it to
    the department's heads, in words."""
    if user.has_perm("tenants.decide_quotarequest", quota_request):
        return
    department = quota_request.head_department
    if department and quota_request.waits_for_head and user.has_perm("tenants.manage_members", quota_request.team):
        raise NotAllowed(f"A lead approved request #{quota_request.pk} for the team; a head of {department.name} "
                         "decides it now.")
    raise PermissionDenied


def _passes_to_head(locked: QuotaRequest, approver: User) -> bool:
    """A lead's approval in a department with two levels is the team's level: a head decides.
    Asked of the rule itself: Django's has_perm grants an active superuser everything."""
    return rules.test_rule("tenants.pass_quotarequest_to_head", approver, locked)


def _endorse(locked: QuotaRequest, lines: list[QuotaRequestLine], department: Department, *, by: User, note: str,
             now: dt.datetime) -> None:
    """Records a lead's approval (of the units that fit now) and passes the request to the heads of
    its team's department: the leads' notices of it are read, the heads and the requester told."""
    summary = f"{_describe_approved(lines)} for {locked.team.slug}"
    for line in lines:
        line.endorsed_units, line.approved_units = line.approved_units, None
    QuotaRequestLine.objects.bulk_update(lines, ["endorsed_units", "approved_units"])
    locked.endorsed_by, locked.endorsed_at, locked.endorsement_note = by, now, note.strip()
    locked.save(update_fields=["endorsed_by", "endorsed_at", "endorsement_note"])
    audit_record(actor=by, action="quota_request.endorsed", obj=locked, team_id=locked.team_id,
                 data={"note": locked.endorsement_note, "department": department.slug},
                 message=f"{by.username} approved request #{locked.pk} for the team ({summary}); it goes to the head "
                         f"of {department.name}")
    notifications_resolve(url=_asks_url(locked))
    notify(recipients=[head for head in selectors.department_heads(team=locked.team) if head.pk != by.pk],
           message=f"{by.username}, a lead of {locked.team.slug}, approved {summary} (request #{locked.pk}); as head of "
                   f"{department.name}, you decide." + (f" Note: {locked.endorsement_note}" if locked.endorsement_note else ""),
           url=_asks_url(locked))
    if locked.requester_id != by.pk:
        notify(recipients=[locked.requester],
               message=f"{by.username} approved your request #{locked.pk} for the team; a head of {department.name} "
                       "decides it now.", url=reverse("tenants:quota-request-detail", args=[locked.pk]))


def _window(quota_request: QuotaRequest, *, now: dt.datetime) -> tuple[dt.datetime, dt.datetime | None]:
    """When the grants of the request would run: from its first day (or now, if that has come),
    to the end of its last day (or for good)."""
    start = max(_start_of_day(quota_request.starts_on), now) if quota_request.starts_on else now
    return start, (_end_of_day(quota_request.ends_on) if quota_request.ends_on else None)


def _room_checked(locked: QuotaRequest, lines: list[QuotaRequestLine],
                  window: tuple[dt.datetime, dt.datetime | None]) -> list[QuotaGrant]:
    """Refuses the approval where a flavor has no room for what it adds at some moment of the
    window its grants would run (every grant counts for its own window: running now, reserved for
    later, or ending before), or where giving back would leave the team below no permanent units.
    Returns the grants a renewal ends as it starts the new ones, which do not count twice."""
    # Lock the flavors (in id order, so two approvals cannot deadlock) before reading the totals:
    # two leads approving at once must not overcommit a flavor between them.
    flavor_ids = [line.flavor_id for line in lines]
    flavors = {f.pk: f for f in Flavor.objects.select_for_update().filter(pk__in=flavor_ids).order_by("pk")}
    permanent = selectors.team_guarantees(team=locked.team, permanent_only=True)
    replaced_grants = (
        list(selectors.renewable_grants(quota_request=locked.renews, lock=True).filter(flavor_id__in=flavor_ids))
        if locked.renews is not None else []
    )
    replaced_ids = [grant.pk for grant in replaced_grants]
    replaced = selectors.units_by_flavor(replaced_grants)
    start, end = window
    problems = []
    for line in lines:
        flavor = flavors[line.flavor_id]
        granted = line.approved_units or 0
        if line.units > 0:
            held = selectors.committed_peak(flavor_id=flavor.pk, start=start, end=end, excluding=replaced_ids)
            if held + granted > flavor.capacity_units:
                room = max(flavor.capacity_units - held, 0)
                promised = _promised(locked, flavor, held, replaced)
                problems.append(f"{flavor.name} has {flavor.capacity_units} units and {promised}; +{granted} would make "
                                f"{held + granted}, so at most {room} more can be approved")
        elif permanent.get(flavor.pk, 0) + line.units < 0:
            problems.append(
                f"{locked.team.slug} now holds {permanent.get(flavor.pk, 0)} permanent {flavor.name}, "
                f"so {line.units} would go below zero"
            )
    if problems:
        raise DomainError(f"Cannot approve request #{locked.pk}: " + "; ".join(problems) + ".")
    return replaced_grants


def _promised(locked: QuotaRequest, flavor: Flavor, peak: int, replaced: Mapping[int, int]) -> str:
    """What teams are promised of the flavor over the request's window, in words: what they hold
    now when that is the peak, else the peak and when (a reservation to come counts)."""
    held_now = selectors.flavor_guaranteed_totals().get(flavor.pk, 0) - replaced.get(flavor.pk, 0)
    pooled = selectors.department_pool_totals().get(flavor.pk, 0)
    if locked.starts_on is None and peak == held_now:
        return f"teams already hold {peak - pooled}{f' and departments pool {pooled}' if pooled else ''}"
    when = (f"from {locked.starts_on.isoformat()}{_until(locked.ends_on)}" if locked.starts_on
            else f"now{_until(locked.ends_on) or ' and later'}")
    return (f"teams are promised up to {peak} of them {when} (reservations{' and department pools' if pooled else ''} "
            "included)")


def _grants_start(locked: QuotaRequest, lines: list[QuotaRequestLine], *, now: dt.datetime) -> None:
    """A grant per line of the approved request, from now (or its first day, reserved until then)
    until the end of its last day if it has one."""
    valid_from, valid_until = _window(locked, now=now)
    QuotaGrant.objects.bulk_create(
        [
            QuotaGrant(
                team=locked.team, flavor=line.flavor, units=line.approved_units or line.units, request=locked,
                valid_from=valid_from, valid_until=valid_until, began_at=now if valid_from <= now else None,
            )
            for line in lines
        ]
    )


def _grants_replace(grants: list[QuotaGrant], *, renewal: QuotaRequest, now: dt.datetime, actor: User) -> None:
    """Ends the grants an approved renewal continues; their request is expired once none runs."""
    if not grants:
        return
    for grant in grants:
        grant.ended_at = now
        audit_record(actor=actor, action="quota_grant.renewed", obj=grant, team_id=grant.team_id,
                     message=f"Temporary grant of {grant.units:+d} {grant.flavor.name} for {renewal.team.slug} "
                             f"(request #{grant.request_id}) continues as request #{renewal.pk}")
    QuotaGrant.objects.bulk_update(grants, ["ended_at"])
    old = renewal.renews
    if old is not None and not QuotaGrant.objects.filter(request_id=old.pk, ended_at__isnull=True).exists():
        QuotaRequest.objects.filter(pk=old.pk, status=QuotaRequest.Status.APPROVED).update(status=QuotaRequest.Status.EXPIRED)


@transaction.atomic
def quota_request_reject(*, quota_request: QuotaRequest, approver: User, note: str = "") -> QuotaRequest:
    _may_decide(approver, quota_request)
    locked = _locked_pending(quota_request, "rejected")
    locked.status = QuotaRequest.Status.REJECTED
    locked.decided_by, locked.decided_at, locked.decision_note = approver, timezone.now(), note.strip()
    locked.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    reason = f": {locked.decision_note}" if locked.decision_note else ""
    audit_record(actor=approver, action="quota_request.rejected", obj=locked, team_id=locked.team_id,
                 data={"note": locked.decision_note},
                 message=f"{approver.username} rejected request #{locked.pk} for {locked.team.slug}{reason}")
    _decided(locked, by=approver, message=f"{approver.username} rejected your request #{locked.pk}{reason}.")
    return _sync_caller_copy(quota_request, locked)


@transaction.atomic
def quota_request_cancel(*, quota_request: QuotaRequest, actor: User) -> QuotaRequest:
    _require(actor.has_perm("tenants.cancel_quotarequest", quota_request))
    locked = _locked_pending(quota_request, "cancelled")
    locked.status = QuotaRequest.Status.CANCELLED
    locked.decided_by, locked.decided_at = actor, timezone.now()
    locked.save(update_fields=["status", "decided_by", "decided_at"])
    audit_record(actor=actor, action="quota_request.cancelled", obj=locked, team_id=locked.team_id,
                 message=f"{actor.username} cancelled request #{locked.pk} for {locked.team.slug}")
    _decided(locked, by=actor, message=f"{actor.username} cancelled your request #{locked.pk} for {locked.team.slug}.")
    return _sync_caller_copy(quota_request, locked)


# --- Expiry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpiryResult:
    ended: int
    warned: int
    begun: int = 0


@transaction.atomic
def quota_grants_expire(*, now: dt.datetime | None = None) -> ExpiryResult:
    """Begins reserved grants whose first day has come, ends grants whose time is up and warns
    about those ending within three days.

    Safe to run at any time and more than once: rows are locked and each grant begins and ends once.
    """
    now = now or timezone.now()
    begun = _grants_begin(now)
    return ExpiryResult(ended=_grants_end(now), warned=_grants_ending_warn(now), begun=begun)


def _grants_begin(now: dt.datetime) -> int:
    """Begins the reserved grants whose first day has come: their team's queue gets them at once
    (the team's configuration moves on), and its leads and the requester are told. Returns how many."""
    due = list(QuotaGrant.objects.filter(began_at__isnull=True, ended_at__isnull=True, valid_from__lte=now,
                                         request__starts_on__isnull=False)
               .select_for_update(skip_locked=True, of=("self",)).select_related("team", "flavor", "request"))
    for grant in due:
        grant.began_at = now
    QuotaGrant.objects.bulk_update(due, ["began_at"])
    leads = selectors.team_leads(team_ids=[g.team_id for g in due])
    for grant in due:
        until = f" through {grant.last_day.isoformat()}" if grant.last_day else ""
        audit_record(actor=None, action="quota_grant.began", obj=grant, team_id=grant.team_id,
                     message=f"Reserved grant of {grant.units:+d} {grant.flavor.name} for {grant.team.slug} began{until}"
                     + (f" (request #{grant.request_id})" if grant.request_id else ""))
        recipients = list(leads[grant.team_id]) + ([grant.request.requester] if grant.request else [])
        notify(recipients=recipients,
               message=f"The reserved {grant.units:+d} {grant.flavor.name} for {grant.team.name} has begun{until}.",
               url=reverse("tenants:team-detail", args=[grant.team.slug]))
    for team_id in sorted({grant.team_id for grant in due}):
        _on_team_change(team_id)
    return len(due)


def _grants_end(now: dt.datetime) -> int:
    """Ends the grants past their end, telling the team's leads and the requester, and expires the
    requests none of whose grants still runs. Returns how many ended."""
    due = list(
        selectors.grants_past_end(now=now)
        .select_for_update(skip_locked=True, of=("self",))
        .select_related("team", "flavor", "request")
    )
    for grant in due:
        grant.ended_at = now
    QuotaGrant.objects.bulk_update(due, ["ended_at"])
    leads = selectors.team_leads(team_ids=[g.team_id for g in due])
    for grant in due:
        audit_record(actor=None, action="quota_grant.ended", obj=grant, team_id=grant.team_id,
                     message=f"Temporary grant of {grant.units:+d} {grant.flavor.name} for {grant.team.slug} ended"
                     + (f" (request #{grant.request_id})" if grant.request_id else ""))
        recipients = list(leads[grant.team_id]) + ([grant.request.requester] if grant.request else [])
        notify(recipients=recipients,
               message=f"The temporary grant of {grant.units:+d} {grant.flavor.name} for {grant.team.name} has ended.",
               url=reverse("tenants:team-detail", args=[grant.team.slug]))
        _on_team_change(grant.team_id)
    ended_requests = {g.request_id for g in due if g.request_id}
    if ended_requests:
        still_running = set(
            QuotaGrant.objects.filter(request_id__in=ended_requests, ended_at__isnull=True).values_list("request_id", flat=True)
        )
        QuotaRequest.objects.filter(pk__in=ended_requests - still_running, status=QuotaRequest.Status.APPROVED).update(
            status=QuotaRequest.Status.EXPIRED
        )
    return len(due)


def _grants_ending_warn(now: dt.datetime) -> int:
    """Warns, once, about the grants that end within GRANT_ENDING_NOTICE. Returns how many."""
    ending = list(
        selectors.grants_ending_between(start=now, end=now + GRANT_ENDING_NOTICE)
        .filter(ending_notice_sent_at__isnull=True, valid_from__lte=now)  # a reservation is told it began first
        .select_for_update(skip_locked=True, of=("self",))
        .select_related("team", "flavor", "request__requester")
    )
    leads = selectors.team_leads(team_ids=[g.team_id for g in ending])
    for grant in ending:
        grant.ending_notice_sent_at = now
        last_day = grant.last_day
        assert last_day is not None  # grants_ending_between returns only grants that end
        recipients = list(leads[grant.team_id]) + ([grant.request.requester] if grant.request else [])
        notify(recipients=recipients,
               message=f"The temporary grant of {grant.units:+d} {grant.flavor.name} for {grant.team.name}"
               f" ends after {last_day.isoformat()}.",
               url=reverse("tenants:team-detail", args=[grant.team.slug]))
    QuotaGrant.objects.bulk_update(ending, ["ending_notice_sent_at"])
    return len(ending)


# ASCII digits with an optional sign: int() would also read "١٢" (Arabic-Indic digits) as 12.
SIGNED_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,18}")


def parse_units(value: Any, *, flavor: Flavor) -> int:
    text = str(value).strip()
    if not SIGNED_WHOLE_NUMBER.fullmatch(text):
        raise DomainError(f"{flavor.name}: “{value}” is not a whole number of units.", field="lines")
    return int(text)



def groups_from_claim(claim: Any) -> list[str]:
    """The group names in an identity provider's groups claim. A provider may send one name as a
    string, nothing, or (misconfigured) numbers and nulls: only strings name groups, and the rest
    is ignored rather than failing the login."""
    if isinstance(claim, str):
        return [claim]
    if not isinstance(claim, list | tuple):
        return []
    return [group for group in claim if isinstance(group, str)]


@transaction.atomic
def memberships_sync_from_groups(*, user: User, groups: Any,
                                 why_left: str = "the identity provider no longer lists the group") -> None:
    """Makes the user's memberships match the identity provider's team groups.

    "<prefix><slug>" makes a member and "<prefix><slug><lead suffix>" a lead. A group that
    names an existing team exactly is always that team's membership, so with teams `ml` and
    `ml-leads` both present, `team-ml-leads` means member of `ml-leads`, never lead of `ml`
    (pick a lead suffix no slug can contain, e.g. ":lead", to lead such a team). Teams the
    claims name but the portal does not have are ignored: a platform admin creates teams.
    `groups` is the claim as the provider sent it (see groups_from_claim).
    """
    prefix, lead_suffix = settings.OIDC_TEAM_GROUP_PREFIX, settings.OIDC_TEAM_LEAD_SUFFIX
    names = [group[len(prefix):] for group in groups_from_claim(groups) if group.startswith(prefix)]
    lead_of = {name[: -len(lead_suffix)]: name for name in names if lead_suffix and name.endswith(lead_suffix)}
    existing = set(Team.objects.filter(slug__in=[*names, *lead_of]).values_list("slug", flat=True))
    wanted: dict[str, str] = {}
    for name in names:
        if name in existing:
            wanted.setdefault(name, Membership.Role.MEMBER)
    for slug, name in lead_of.items():
        if slug in existing and name not in existing:
            wanted[slug] = Membership.Role.LEAD
    teams = {team.slug: team for team in Team.objects.filter(slug__in=wanted)}
    current = {m.team.slug: m for m in Membership.objects.filter(user=user).select_related("team")}
    for slug, stale in current.items():
        if slug not in teams:
            audit_record(actor=None, action="membership.removed", obj=stale, team_id=stale.team_id,
                         message=f"{user.username} left {slug}: {why_left}")
            stale.delete()
            _on_team_change(stale.team_id)
    for slug, team in teams.items():
        role = wanted[slug]
        membership = current.get(slug)
        if membership is None:
            membership = Membership.objects.create(team=team, user=user, role=role)
            audit_record(actor=None, action="membership.added", obj=membership, team_id=team.pk,
                         message=f"{user.username} joined {slug} as {membership.get_role_display().lower()}"
                         " through single sign-on")
            _on_team_change(team.pk)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
            audit_record(actor=None, action="membership.role_changed", obj=membership, team_id=team.pk,
                         message=f"{user.username} is now {membership.get_role_display().lower()} of {slug}"
                         " through single sign-on")
            _on_team_change(team.pk)
    forget_team_roles(user)


# --- Single sign-on: roles from the provider's groups, and their revalidation -----------------


def _holds_a_role(user: User) -> bool:
    return user.is_platform_admin or user.is_finance or Membership.objects.filter(user=user).exists()


@transaction.atomic
def sso_roles_apply(*, user: User, groups: Any, source: str) -> None:
    """Gives an SSO account exactly the roles its provider groups carry, as at a login: platform
    admin (and Django admin staff), finance, team memberships. Never a superuser bit the groups
    cannot take away. A user left with no role loses their API tokens too. `source` says, for the
    audit trail, what vouched for the groups."""
    names = groups_from_claim(groups)
    had_roles = _holds_a_role(user)
    user.is_platform_admin = any(g in settings.OIDC_ADMIN_GROUPS for g in names)
    user.is_finance = any(g in settings.OIDC_FINANCE_GROUPS for g in names)
    user.is_staff = user.is_platform_admin
    user.is_superuser = False
    user.save()
    memberships_sync_from_groups(user=user, groups=names)
    if had_roles and not _holds_a_role(user):
        api_tokens_revoke_all(user=user, reason=f"{source} no longer gives them any role")


@dataclass(frozen=True)
class RevalidationResult:
    confirmed: int
    demoted: int
    waiting: int  # past due, still within the grace period


def _revalidation_check() -> Any:
    path = settings.OIDC_REVALIDATE_CHECK
    if not path:
        return None
    return import_string(path)


def sso_identities_revalidate(*, now: dt.datetime | None = None) -> RevalidationResult:
    """Re-confirms SSO accounts whose groups the provider last vouched for more than
    OIDC_REVALIDATE_AFTER ago, and takes every group-derived role and API token from those it
    cannot confirm within OIDC_REVALIDATE_GRACE after that.

    Roles otherwise change only when the user signs in, so someone removed from the admin group
    who never signs in again would keep admin, and their 365-day token with it. Confirming means
    asking the check named by OIDC_REVALIDATE_CHECK (a callable taking the SsoIdentity and
    returning the provider's current claims, or None when it cannot tell); a site without one
    confirms only through sign-ins. Each user is handled in a transaction of their own, so one
    failure or a slow check does not hold up the rest. Safe to run at any time and twice.
    """
    now = now or timezone.now()
    due_before = now - dt.timedelta(seconds=settings.OIDC_REVALIDATE_AFTER)
    check = _revalidation_check()
    confirmed = demoted = waiting = 0
    due = (SsoIdentity.objects.filter(confirmed_at__lt=due_before, user__is_active=True)
           .exclude(demoted_at__gte=F("confirmed_at")).values_list("pk", flat=True))
    for identity_id in list(due):
        outcome = _sso_identity_revalidate(identity_id=identity_id, now=now, check=check)
        confirmed += outcome == "confirmed"
        demoted += outcome == "demoted"
        waiting += outcome == "waiting"
    return RevalidationResult(confirmed=confirmed, demoted=demoted, waiting=waiting)


def _ask(check: Any, identity: Any) -> dict[str, Any] | None:
    if check is None:
        return None
    try:
        claims = check(identity)
    except Exception:  # the provider's trouble is a reason to wait, never to crash the pass for everyone
        log.warning("revalidation check failed for %s", identity, exc_info=True)
        return None
    return claims if isinstance(claims, dict) else None


@transaction.atomic
def _sso_identity_revalidate(*, identity_id: int, now: dt.datetime, check: Any) -> str:
    identity = (SsoIdentity.objects.select_for_update(skip_locked=True, of=("self",)).select_related("user")
                .filter(pk=identity_id).first())
    after = dt.timedelta(seconds=settings.OIDC_REVALIDATE_AFTER)
    # Locked by a login confirming it right now, or confirmed since the list was read: nothing to do.
    if identity is None or identity.confirmed_at >= now - after:
        return "current"
    user = identity.user
    claims = _ask(check, identity)
    if claims is not None:
        sso_roles_apply(user=user, groups=claims.get(settings.OIDC_GROUPS_CLAIM), source="the identity provider")
        identity.confirmed_at = now
        identity.save(update_fields=["confirmed_at"])
        return "confirmed"
    if identity.confirmed_at >= now - after - dt.timedelta(seconds=settings.OIDC_REVALIDATE_GRACE):
        return "waiting"
    last = timezone.localtime(identity.confirmed_at)
    roles = [name for name, held in (("platform admin", user.is_platform_admin), ("finance", user.is_finance)) if held]
    memberships = Membership.objects.filter(user=user).select_related("team")
    roles += [f"{m.get_role_display().lower()} of {m.team.slug}" for m in memberships]
    window = (settings.OIDC_REVALIDATE_AFTER + settings.OIDC_REVALIDATE_GRACE) / 3600
    reason = f"the identity provider has not confirmed their groups since {last:%Y-%m-%d %H:%M} (over {window:g} h)"
    audit_record(actor=None, action="sso_identity.unconfirmed", obj=user,
                 data={"confirmed_at": identity.confirmed_at.isoformat(), "roles": roles},
                 message=f"{user.username} lost {', '.join(roles) or 'no role'} and their API tokens: {reason};"
                 " signing in gives back what their groups carry")
    user.is_platform_admin = user.is_finance = user.is_staff = user.is_superuser = False
    user.save()
    memberships_sync_from_groups(user=user, groups=[], why_left=reason)
    api_tokens_revoke_all(user=user, reason=reason)
    identity.demoted_at = now
    identity.save(update_fields=["demoted_at"])
    notify(recipients=[user], url=reverse("tenants:dashboard"),
           message="Your roles and API tokens were taken away because your identity provider has not confirmed your "
           "groups for a while. Sign in again to get back what your groups give you.")
    return "demoted"
