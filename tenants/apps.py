from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams and quota"

    def ready(self) -> None:
        from portal.observability import scrape_collector_register
        from tenants import signals  # noqa: F401 - connects the receivers
        from tenants.desired import network_spec
        from tenants.observability import TeamCollector
        from tenants.queueing import backend

        network_spec()  # an egress setting that could open the metadata address stops the start here
        backend()  # so does a queue backend the portal does not have
        scrape_collector_register(TeamCollector())
