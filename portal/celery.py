import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Beat's sending of it is beat's own sign of life (portal.health.beat_heartbeat).
HEARTBEAT_TASK = "portal.tasks.heartbeat"
