from django.apps import AppConfig


class HooksConfig(AppConfig):
    """Installed last: by its ready() every other app has filled its hooks, so one left empty
    stops the web server, the workers, beat, the watcher and manage.py alike, at start."""

    name = "portal.hooks"
    label = "portal_hooks"
    verbose_name = "Hooks between apps"

    def ready(self) -> None:
        from portal import hooks

        hooks.verify()
