"""The simulated cluster's tables: its objects and its change log.

In the database so the web process and the workers see one cluster.
"""

from __future__ import annotations

from django.db import models


class SimulatedObject(models.Model):
    """An object of the simulated cluster, stored as the same dict a real API server keeps."""

    api_version = models.CharField(max_length=100)
    kind = models.CharField(max_length=60)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    body = models.JSONField()
    resource_version = models.BigIntegerField(default=0)

    class Meta:
        # Explicit, so importing this module where the app is not installed never files these under portal.
        app_label = "simulated_cluster"
        constraints = [
            models.UniqueConstraint(fields=["api_version", "kind", "namespace", "name"], name="one_simulated_object")
        ]
        indexes = [models.Index(fields=["kind", "namespace"], name="simulated_object_kind_ns")]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


class SimulatedEvent(models.Model):
    """The simulated cluster's change log: its ids are resourceVersions, watches read it."""

    api_version = models.CharField(max_length=100)
    kind = models.CharField(max_length=60)
    namespace = models.CharField(max_length=63, blank=True)
    type = models.CharField(max_length=10)
    body = models.JSONField()

    class Meta:
        app_label = "simulated_cluster"
        indexes = [models.Index(fields=["kind", "id"], name="simulated_event_kind_id")]

    def __str__(self) -> str:
        return f"{self.type} {self.kind} #{self.pk}"
