from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import budgets, selectors, signals
        from jobs import pricing
        from tenants import desired

        signals.connect()
        pricing.register_price_provider(lambda flavor, units: selectors.hourly_cost(flavor=flavor, units=units))
        pricing.register_usage_provider(lambda workload_ids: selectors.workload_costs(workload_ids=workload_ids))
        pricing.register_launch_guard(lambda team: budgets.launch_refusal(team=team))
        desired.register_hold_provider(budgets.held_team_ids)
