"""Platform-wide role predicates. Team predicates build on these in tenants/rules.py."""

from __future__ import annotations

import rules


@rules.predicate
def is_platform_admin(user) -> bool:  # type: ignore[no-untyped-def]
    return bool(user.is_authenticated and user.is_active and (user.is_platform_admin or user.is_superuser))


@rules.predicate
def is_finance(user) -> bool:  # type: ignore[no-untyped-def]
    return bool(user.is_authenticated and user.is_active and user.is_finance)


sees_all_teams = is_platform_admin | is_finance
