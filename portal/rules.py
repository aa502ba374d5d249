"""Who may do what with what the portal itself holds: costs and API tokens."""

from __future__ import annotations

from typing import Any

import rules

from portal.roles import is_finance, is_platform_admin


@rules.predicate
def owns_token(user: Any, token: Any) -> bool:
    return token is not None and token.user_id == user.pk


rules.add_perm("portal.read_costs", is_finance | is_platform_admin)
rules.add_perm("portal.revoke_apitoken", is_platform_admin | owns_token)
# Who is finance or platform admin, and whether an account may sign in (tenants/people.py).
rules.add_perm("portal.manage_people", is_platform_admin)
# Django's admin site lets in active staff only; the link to it asks the same question here.
rules.add_perm("portal.open_admin", rules.is_active & rules.is_staff)
