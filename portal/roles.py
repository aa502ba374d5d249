"""Platform-wide role predicates. Team predicates build on these in tenants/rules.py."""

from __future__ import annotations

import rules
from django.contrib.auth.models import AnonymousUser

from portal.models import User


@rules.predicate
def is_platform_admin(user: User | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and (user.is_platform_admin or user.is_superuser))


@rules.predicate
def is_finance(user: User | AnonymousUser) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_finance)


sees_all_teams = is_platform_admin | is_finance
