from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from jobs.selectors import team_contents
        from tenants.selectors import register_team_contents

        register_team_contents(team_contents)
