"""Billing's tables, one module per concern: the rate card, metered usage, statements, budgets."""

from billing.models.budgets import AlertEmailPreference, Budget, BudgetAlert, DigestEntry
from billing.models.energy import EnergyHour, EnergyState
from billing.models.rates import Rate
from billing.models.statements import Adjustment, Statement, StatementEnergy, StatementLine
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
           "EnergyHour", "EnergyState", "FlavorHour", "GuaranteeHour", "IdlePolicy", "LentHour", "MeteringState", "Rate",
           "Statement", "StatementEnergy", "StatementLine", "UsageHour", "UsageMonth"]
