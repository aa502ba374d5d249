from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams and quota"

    def ready(self) -> None:
        from tenants import signals  # noqa: F401 - connects the receivers
