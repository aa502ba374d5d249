"""Template helpers for usage and cost figures."""

from __future__ import annotations

from django import template

from billing.selectors import WorkloadCost

register = template.Library()


@register.filter
def cost_of(costs: dict[int, WorkloadCost] | None, workload_id: int) -> WorkloadCost | None:
    """The workload's figures from a dict the view read in one go (`workload_costs`)."""
    return (costs or {}).get(workload_id)


@register.inclusion_tag("billing/_workload_cost.html")
def workload_cost(cost: WorkloadCost | None) -> dict[str, WorkloadCost | None]:
    return {"cost": cost}
