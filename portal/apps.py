from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "GPU Portal"

    def ready(self) -> None:
        from portal import signin  # noqa: F401  (connects the sign-in failure counters)
        from portal.observability import HeartbeatCollector, scrape_collector_register

        scrape_collector_register(HeartbeatCollector())
