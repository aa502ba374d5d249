from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "GPU Portal"

    def ready(self) -> None:
        # Imported for what importing does: the deployment checks register, the sign-in stamp and
        # the failure counters connect to their signals.
        from portal import checks, security, signin  # noqa: F401
        from portal.observability import HeartbeatCollector, scrape_collector_register

        scrape_collector_register(HeartbeatCollector())
