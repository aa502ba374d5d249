"""The demo site: `manage.py seed_demo` seeds every app, so it sits to the right of them all."""
