from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "GPU Portal"

    def ready(self) -> None:
        from portal import signin  # noqa: F401  (connects the sign-in failure counters)
