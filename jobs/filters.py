"""The filters of the template and workload lists, shared by the pages and the API.

A team or template the caller cannot see matches nothing, like one that does not exist: the
list is empty (see tenants/filters.py).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet

from jobs import selectors
from jobs.models import TeamCredential, TeamVolume, Workload, WorkloadTemplate
from portal.adapters import FlagFilter, VisibleSlugFilter, choice_errors
from tenants.filters import VisibleTeamFilter
from tenants.models import Team


class VisibleTemplateFilter(VisibleSlugFilter):
    """A template named by its id, or by a slug (old links), which matches every template the
    caller can see that has it: slugs are unique only within a team."""

    def visible(self, user: Any) -> QuerySet[WorkloadTemplate]:
        return WorkloadTemplate.objects.for_user(user)

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if not value:
            return qs
        user = getattr(self.parent, "request", None) and self.parent.request.user
        wanted = selectors.templates_named(templates=self.visible(user), reference=value).values("pk")
        return qs.filter(**{f"{self.field_name}__in": wanted})


class TemplateFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(method="filter_team",
                             help_text="Only the templates the team with this slug can launch (active ones).")

    class Meta:
        model = WorkloadTemplate
        fields: list[str] = []

    def filter_team(self, queryset: QuerySet[WorkloadTemplate], name: str, value: str) -> QuerySet[WorkloadTemplate]:
        team = Team.objects.for_user(self.request.user).filter(slug=value).first()
        if team is None:
            return queryset.none()
        return queryset.filter(pk__in=WorkloadTemplate.objects.for_team(team).values("pk"))


class WorkloadFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")
    phase = django_filters.ChoiceFilter(choices=Workload.Phase.choices,
                                        error_messages=choice_errors("phase", Workload.Phase.values))
    owner = django_filters.CharFilter(method="filter_owner", help_text="“me”, or a username.")
    mine = FlagFilter(method="filter_mine", help_text="1: only the caller's workloads, like owner=me.")
    template = VisibleTemplateFilter(field_name="template_version__template",
                                     help_text="Only workloads launched from the template with this id "
                                               "(or slug: every template you can see that has it).")

    class Meta:
        model = Workload
        fields: list[str] = []

    def filter_owner(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        if value == "me":
            return queryset.filter(owner=self.request.user)
        return queryset.filter(owner__username=value)

    def filter_mine(self, queryset: QuerySet[Workload], name: str, value: bool) -> QuerySet[Workload]:
        return queryset.filter(owner=self.request.user) if value else queryset


class TeamVolumeFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")

    class Meta:
        model = TeamVolume
        fields: list[str] = []


class TeamCredentialFilter(django_filters.FilterSet):
    team = VisibleTeamFilter(field_name="team")

    class Meta:
        model = TeamCredential
        fields: list[str] = []
