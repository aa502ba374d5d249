from django.apps import AppConfig


class SimulatedClusterConfig(AppConfig):
    """Installed only when PORTAL_CLUSTER is "simulated": a real site carries no simulator tables."""

    name = "portal.kube.simulated"
    label = "simulated_cluster"
    verbose_name = "Simulated cluster"
    default_auto_field = "django.db.models.BigAutoField"
