from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import signals
        from billing.budgets import selectors as budget_selectors
        from billing.rates import selectors as rate_selectors
        from billing.usage import workloads
        from jobs import pricing
        from tenants import desired
        from tenants import selectors as tenant_selectors

        signals.connect()
        pricing.PRICE.fill(lambda flavor, units: rate_selectors.hourly_cost(flavor=flavor, units=units))
        pricing.USAGE.fill(lambda workload_ids: workloads.workload_costs(workload_ids=workload_ids))
        pricing.LAUNCH_GUARD.fill(lambda team, flavors: (rate_selectors.unpriced_refusal(flavors=flavors)
                                                         or budget_selectors.launch_refusal(team=team)))
        desired.HOLDS.fill(budget_selectors.held_team_ids)
        tenant_selectors.PRICED_FLAVORS.fill(lambda flavor_ids: rate_selectors.priced_flavors(flavor_ids=flavor_ids))
