"""Who may change prices and budgets and close statements: finance and platform admins."""

from __future__ import annotations

import rules
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied

from portal.models import User
from portal.roles import is_finance, is_platform_admin
from tenants.rules import leads_a_team

rules.add_perm("billing.set_rates", is_finance | is_platform_admin)
rules.add_perm("billing.set_budgets", is_finance | is_platform_admin)
# Closing a month and adjusting its statement: finance's job, and platform admins may stand in.
rules.add_perm("billing.close_statements", is_finance | is_platform_admin)
# Statements are read by finance and platform admins (every team) and by team leads (their team's part).
rules.add_perm("billing.read_statements", is_finance | is_platform_admin | leads_a_team)


def require_costs(user: User | AnonymousUser) -> None:
    """The guard of what only those who read costs see (every team's costs, the rate card): finance
    and platform admins, by `portal.read_costs`; the pages and the API ask it alike."""
    if not user.has_perm("portal.read_costs"):
        raise PermissionDenied
