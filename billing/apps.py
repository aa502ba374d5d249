from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import selectors, signals
        from jobs import pricing

        signals.connect()
        pricing.register_price_provider(lambda flavor, units: selectors.hourly_cost(flavor=flavor, units=units))
