from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "GPU Portal"

    def ready(self) -> None:
        # Imported for what importing does: the deployment checks register, the sign-in stamp, the
        # failure counters and beat's heartbeat connect to their signals.
        from portal import checks, health, security, signin  # noqa: F401
        from portal.health import HeartbeatCollector
        from portal.observability import scrape_collector_register

        scrape_collector_register(HeartbeatCollector())
