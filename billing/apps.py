from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import budgets, selectors, signals
        from jobs import pricing
        from tenants import desired
        from tenants import selectors as tenant_selectors

        signals.connect()
        pricing.PRICE.fill(lambda flavor, units: selectors.hourly_cost(flavor=flavor, units=units))
        pricing.USAGE.fill(lambda workload_ids: selectors.workload_costs(workload_ids=workload_ids))
        pricing.LAUNCH_GUARD.fill(lambda team, flavors: (selectors.unpriced_refusal(flavors=flavors)
                                                         or budgets.launch_refusal(team=team)))
        desired.HOLDS.fill(budgets.held_team_ids)
        tenant_selectors.PRICED_FLAVORS.fill(lambda flavor_ids: selectors.priced_flavors(flavor_ids=flavor_ids))
