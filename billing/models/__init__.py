"""Billing's tables, one module per concern: the rate card, metered usage, statements, budgets."""

from billing.models.budgets import AlertEmailPreference, Budget, BudgetAlert, DigestEntry
from billing.models.rates import Rate
from billing.models.statements import Adjustment, Statement, StatementLine
from billing.models.usage import (
                                  Account,
                                  CapacityHour,
                                  FlavorHour,
                                  GuaranteeHour,
                                  IdlePolicy,
                                  LentHour,
                                  MeteringState,
                                  UsageHour,
                                  UsageMonth,
)

__all__ = ["Account", "Adjustment", "AlertEmailPreference", "Budget", "BudgetAlert", "CapacityHour", "DigestEntry",
           "FlavorHour", "GuaranteeHour", "IdlePolicy", "LentHour", "MeteringState", "Rate", "Statement", "StatementLine",
           "UsageHour", "UsageMonth"]
