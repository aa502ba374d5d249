from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from jobs.observability import WorkloadCollector
        from portal.observability import scrape_collector_register

        scrape_collector_register(WorkloadCollector())
