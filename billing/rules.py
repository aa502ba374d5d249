"""Who may change prices and budgets and close statements: finance and platform admins."""

from __future__ import annotations

import rules

from portal.roles import is_finance, is_platform_admin
from tenants.rules import leads_a_team

rules.add_perm("billing.set_rates", is_finance | is_platform_admin)
rules.add_perm("billing.set_budgets", is_finance | is_platform_admin)
# Closing a month and adjusting its statement: finance's job, and platform admins may stand in.
rules.add_perm("billing.close_statements", is_finance | is_platform_admin)
# Statements are read by finance and platform admins (every team) and by team leads (their team's part).
rules.add_perm("billing.read_statements", is_finance | is_platform_admin | leads_a_team)
