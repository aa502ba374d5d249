import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

from portal.collector import startup_objects_frozen  # noqa: E402 - once the portal has loaded

startup_objects_frozen()
