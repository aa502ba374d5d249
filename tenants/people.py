"""People: what a platform admin decides about an account where single sign-on does not (who is
finance or platform admin, whether the account may sign in), and the reads of the People pages
and API (a person's teams and API tokens).

In tenants, not portal, because a person's teams are memberships; the account itself is
portal's User. Single sign-on decides the roles of an account it signs in: `sso_roles_apply`
gives an SSO account exactly what its provider groups carry at every login (platform admin,
finance, team memberships), so a change made here would be undone at the next one. Those roles
are shown as the provider's and refused here in words. Whether an account may sign in is the
portal's own decision for every account: the provider never reactivates one.

Deactivating saves the User's `is_active`, which `tenants.signals` turns into a reconcile of the
person's teams (their RoleBinding names them no longer), as a save from the Django admin does;
an inactive account's API tokens stop working (`ApiToken.objects.usable`) and its session ends
at its next request. A platform admin cannot take their own platform admin role away or
deactivate themselves (the platform must keep someone who can undo it), and a superuser, the
break-glass account, is changed only in the Django admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, QuerySet

from portal.audit import audit_record
from portal.errors import DomainError, NotAllowed, StateConflict
from portal.models import ApiToken, AuditEvent, SsoIdentity, User
from portal.tokens import api_token_revoke
from tenants.models import Membership

ROLE_FIELDS = ("is_platform_admin", "is_finance")
ROLE_WORDS = {"is_platform_admin": "platform admin", "is_finance": "finance"}
SSO_GROUP_SETTINGS = {"is_platform_admin": "OIDC_ADMIN_GROUPS", "is_finance": "OIDC_FINANCE_GROUPS"}


def _require_manager(actor: User) -> None:
    if not actor.has_perm("portal.manage_people"):
        raise PermissionDenied


# --- Reads ------------------------------------------------------------------------------------


def people_for_user(*, user: Any) -> QuerySet[User]:
    """Every account, for someone who manages people; none for anyone else. Each carries
    `signs_in_with_sso` (single sign-on decides its roles) and `team_count`."""
    if not user.has_perm("portal.manage_people"):
        return User.objects.none()
    return User.objects.annotate(
        signs_in_with_sso=Exists(SsoIdentity.objects.filter(user=OuterRef("pk"))),
        team_count=Count("memberships", distinct=True),
    ).order_by("username", "pk")


@dataclass(frozen=True)
class PersonPicture:
    """One person as the People page shows them."""

    person: User
    sso: SsoIdentity | None
    memberships: list[Membership]
    tokens: list[ApiToken]
    events: list[AuditEvent]

    @property
    def roles_from_sso(self) -> bool:
        return self.sso is not None


PERSON_EVENTS = 20


def person_picture(*, person: User) -> PersonPicture:
    return PersonPicture(
        person=person,
        sso=SsoIdentity.objects.filter(user=person).first(),
        memberships=list(Membership.objects.filter(user=person).select_related("team").order_by("team__name")),
        tokens=list(ApiToken.objects.filter(user=person).order_by("-created_at")),
        events=list(AuditEvent.objects.filter(object_type="user", object_id=str(person.pk))[:PERSON_EVENTS]),
    )


# --- Writes -----------------------------------------------------------------------------------


def sso_role_refusal(person: User, field: str) -> str:
    return (f"{person.username} signs in through single sign-on, so the identity provider's groups decide whether "
            f"they are {ROLE_WORDS[field]} ({SSO_GROUP_SETTINGS[field]}), and their next sign-in would undo a change "
            "made here. Change their groups at the provider.")


@transaction.atomic
def person_roles_set(*, actor: User, person: User, roles: dict[str, bool]) -> User:
    """Makes a local account finance or platform admin, or not (`roles`: field → wanted). A
    platform admin's Django admin access (`is_staff`) follows the role, as for SSO accounts."""
    _require_manager(actor)
    unknown = set(roles) - set(ROLE_FIELDS)
    if unknown:
        raise DomainError(f"{', '.join(sorted(unknown))} is not a role set here; the roles are "
                          f"{' and '.join(ROLE_FIELDS)}.", field=sorted(unknown)[0])
    locked = User.objects.select_for_update().get(pk=person.pk)
    changed = {field: wanted for field, wanted in roles.items() if getattr(locked, field) != wanted}
    if not changed:
        return locked
    if SsoIdentity.objects.filter(user=locked).exists():
        field = next(iter(changed))
        raise NotAllowed(sso_role_refusal(locked, field), field=field)
    if changed.get("is_platform_admin") is False:
        if locked.pk == actor.pk:
            raise NotAllowed("You cannot take away your own platform admin role: another platform admin must, so "
                             "the platform is never left without someone who can give it back.", field="is_platform_admin")
        if locked.is_superuser:
            raise NotAllowed(f"{locked.username} is a superuser, which makes them a platform admin whatever this "
                             "says; only the Django admin changes a superuser.", field="is_platform_admin")
    before = {field: getattr(locked, field) for field in ROLE_FIELDS}
    for field, wanted in changed.items():
        setattr(locked, field, wanted)
    update = list(changed)
    if "is_platform_admin" in changed:
        locked.is_staff = changed["is_platform_admin"]
        update.append("is_staff")
    locked.save(update_fields=update)
    words = "; ".join(f"{'made' if wanted else 'took away'} {ROLE_WORDS[field]}" for field, wanted in changed.items())
    audit_record(actor=actor, action="user.roles_changed", obj=locked,
                 data={"before": before, "after": {field: getattr(locked, field) for field in ROLE_FIELDS}},
                 message=f"{actor.username} changed {locked.username}'s roles: {words}")
    person.__dict__.update({field: getattr(locked, field) for field in [*ROLE_FIELDS, "is_staff"]})
    return locked


@transaction.atomic
def person_active_set(*, actor: User, person: User, active: bool) -> User:
    """Deactivates an account (it can no longer sign in, its tokens stop working, its teams are
    reconciled without it) or reactivates it. Its memberships and tokens are kept for a return."""
    _require_manager(actor)
    locked = User.objects.select_for_update().get(pk=person.pk)
    if locked.is_active == active:
        raise StateConflict(f"{locked.username} is already {'active' if active else 'deactivated'}.", field="is_active")
    if not active and locked.pk == actor.pk:
        raise NotAllowed("You cannot deactivate your own account: another platform admin must.", field="is_active")
    if locked.is_superuser:
        raise NotAllowed(f"{locked.username} is a superuser, the break-glass account; only the Django admin "
                         "deactivates or reactivates a superuser.", field="is_active")
    locked.is_active = active
    locked.save(update_fields=["is_active"])  # tenants.signals reconciles the person's teams
    if active:
        message = f"{actor.username} reactivated {locked.username}'s account"
    else:
        message = f"{actor.username} deactivated {locked.username}'s account: they can no longer sign in or use their API tokens"
    audit_record(actor=actor, action="user.reactivated" if active else "user.deactivated", obj=locked, message=message)
    person.is_active = active
    return locked


@transaction.atomic
def person_update(*, actor: User, person: User, roles: dict[str, bool], active: bool | None) -> User:
    """The API's change of a person: the roles and the account's state asked, all or none.
    Asking for the state the account is already in changes nothing."""
    if roles:
        person_roles_set(actor=actor, person=person, roles=roles)
    else:
        _require_manager(actor)
    if active is not None and active != person.is_active:
        person_active_set(actor=actor, person=person, active=active)
    return person


def person_token_revoke(*, actor: User, person: User, token: ApiToken) -> ApiToken:
    """Revokes one of the person's API tokens (portal.tokens.api_token_revoke, which audits it)."""
    _require_manager(actor)
    if token.user_id != person.pk:
        raise DomainError(f"Token “{token.name}” is not {person.username}'s.", field="token")
    return api_token_revoke(token=token, actor=actor)

