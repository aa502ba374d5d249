"""The filters of the portal's own lists, shared by the pages and the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet

from portal.adapters import FlagFilter
from portal.models import Notification


class NotificationFilter(django_filters.FilterSet):
    unread = FlagFilter(method="filter_unread", help_text="1: only notifications not read yet.")

    class Meta:
        model = Notification
        fields: list[str] = []

    def filter_unread(self, queryset: QuerySet[Notification], name: str, value: Any) -> QuerySet[Notification]:
        # 0 means "not only the unread ones", as it always has: the list never hides unread notes.
        return queryset.unread() if value else queryset  # type: ignore[attr-defined]
