"""The filters of the team and quota lists, one FilterSet per list, shared by the pages and the
API (where drf-spectacular documents their parameters).

A team filter names the team by its slug among the teams the caller can see. A team the caller
cannot see matches nothing, like a team that does not exist: the list is empty, never a 400 or
a 404, so a filter never tells whether a team exists.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from portal.adapters import FlagFilter, VisibleSlugFilter, choice_errors
from portal.models import AuditEvent, User
from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, Team

TEAM_HELP = "Only rows of the team with this slug; a team you cannot see matches nothing."


class VisibleTeamFilter(VisibleSlugFilter):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", TEAM_HELP)
        super().__init__(**kwargs)

    def visible(self, user: Any) -> QuerySet[Team]:
        return Team.objects.for_user(user)


class MembershipFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")

    class Meta:
        model = Membership
        fields: list[str] = []


class QuotaRequestFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")
    status = django_filters.ChoiceFilter(choices=QuotaRequest.Status.choices,
                                         error_messages=choice_errors("status", QuotaRequest.Status.values))
    mine = FlagFilter(method="filter_mine", help_text="1: only requests the caller filed.")

    class Meta:
        model = QuotaRequest
        fields: list[str] = []

    def filter_mine(self, queryset: QuerySet[QuotaRequest], name: str, value: bool) -> QuerySet[QuotaRequest]:
        return queryset.filter(requester=self.request.user) if value else queryset


class QuotaGrantFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")
    active = FlagFilter(method="filter_active", help_text="1: grants in force now; 0: ended or not yet valid.")

    class Meta:
        model = QuotaGrant
        fields: list[str] = []

    def filter_active(self, queryset: QuerySet[QuotaGrant], name: str, value: bool) -> QuerySet[QuotaGrant]:
        in_force = QuotaGrant.objects.active().values("pk")
        return queryset.filter(pk__in=in_force) if value else queryset.exclude(pk__in=in_force)


class AuditEventFilter(django_filters.FilterSet):
    # Events name their team by id, so that the trail outlives a deleted team.
    team = VisibleTeamFilter(field_name="team_id")

    class Meta:
        model = AuditEvent
        fields: list[str] = []


class FlavorFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(method="filter_team",
                             help_text="Also show what the team with this slug holds; a team you cannot see: no rows.")

    class Meta:
        model = Flavor
        fields: list[str] = []

    def filter_team(self, queryset: QuerySet[Flavor], name: str, value: str) -> QuerySet[Flavor]:
        # The flavors are the same for every team; the team only adds a column. One the caller
        # cannot see empties the list, as it does on every other list.
        visible = Team.objects.for_user(self.request.user).filter(slug=value).exists()
        return queryset if visible else queryset.none()


class PersonFilter(django_filters.FilterSet):
    """The People list (platform admins): a search and two filters."""

    ROLES = [("admin", "Platform admins"), ("finance", "Finance")]

    search = django_filters.CharFilter(method="filter_search", help_text="Part of the username, name or email.")
    role = django_filters.ChoiceFilter(choices=ROLES, method="filter_role",
                                       error_messages=choice_errors("role", [value for value, _ in ROLES]),
                                       help_text="admin: platform admins and superusers; finance: finance.")
    active = FlagFilter(method="filter_active", help_text="1: accounts that may sign in; 0: deactivated ones.")

    class Meta:
        model = User
        fields: list[str] = []

    def filter_search(self, queryset: QuerySet[User], name: str, value: str) -> QuerySet[User]:
        text = value.strip()
        if not text:
            return queryset
        return queryset.filter(Q(username__icontains=text) | Q(first_name__icontains=text)
                               | Q(last_name__icontains=text) | Q(email__icontains=text))

    def filter_active(self, queryset: QuerySet[User], name: str, value: bool | None) -> QuerySet[User]:
        return queryset if value is None else queryset.filter(is_active=value)

    def filter_role(self, queryset: QuerySet[User], name: str, value: str) -> QuerySet[User]:
        if value == "admin":
            return queryset.filter(Q(is_platform_admin=True) | Q(is_superuser=True))
        return queryset.filter(is_finance=True) if value == "finance" else queryset
