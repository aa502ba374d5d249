"""Platform-wide role predicates. Team predicates build on these in tenants/rules.py.

These are the only places that read the role flags of a user (`is_platform_admin`,
`is_superuser`, `is_finance`): everything else asks a permission, or, in a queryset's
`for_user`, one of these predicates.
"""

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


# The one rule for "sees every team's objects"; `tenants.view_all_teams` asks it.
sees_all_teams = is_platform_admin | is_finance
