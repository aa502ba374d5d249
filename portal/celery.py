import os
from typing import Any

from celery import Celery
from celery.signals import before_task_publish

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

HEARTBEAT_TASK = "portal.tasks.heartbeat"


@before_task_publish.connect
def beat_heartbeat(sender: str | None = None, **kwargs: Any) -> None:
    """Only beat sends the heartbeat task, so sending it is beat's own sign of life."""
    if sender != HEARTBEAT_TASK:
        return
    from portal.health import BEAT, heartbeat_record

    heartbeat_record(name=BEAT)
