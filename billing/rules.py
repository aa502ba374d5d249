"""Who may change prices and budgets: finance and platform admins."""

from __future__ import annotations

import rules

from portal.roles import is_finance, is_platform_admin

rules.add_perm("billing.set_rates", is_finance | is_platform_admin)
rules.add_perm("billing.set_budgets", is_finance | is_platform_admin)
