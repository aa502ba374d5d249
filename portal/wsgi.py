import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

from portal.collector import startup_objects_frozen  # noqa: E402 - once the portal has loaded

# What it buys: each full collection of the cyclic collector, which stops every thread of the
# process, no longer walks what the process loaded to start. benchmarks/workloads.py reports those
# pauses (collector_pauses.gen2): their longest 43 to 84 ms with this, 230 to 280 ms without.
startup_objects_frozen()
