from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from jobs.observability import WorkloadCollector
        from jobs.selectors import flavor_of_pods, team_contents
        from portal.observability import scrape_collector_register
        from tenants.selectors import register_team_contents
        from tenants.telemetry_selectors import register_flavor_of_pods

        register_team_contents(team_contents)
        register_flavor_of_pods(flavor_of_pods)
        scrape_collector_register(WorkloadCollector())
