from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from jobs.observability import WorkloadCollector
        from jobs.selectors import team_contents
        from portal.observability import scrape_collector_register
        from tenants.selectors import register_team_contents

        register_team_contents(team_contents)
        scrape_collector_register(WorkloadCollector())
