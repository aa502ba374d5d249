from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "GPU Portal"

    def ready(self) -> None:
        from portal import security, signin  # noqa: F401  (connect the sign-in stamp and failure counters)
        from portal.observability import HeartbeatCollector, scrape_collector_register

        scrape_collector_register(HeartbeatCollector())
