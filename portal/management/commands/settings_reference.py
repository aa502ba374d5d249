"""Write the configuration reference, docs/configuration.md, from the one declaration of every
setting (portal/configuration.py). Run it after changing a setting; a test fails while the
committed page differs from what this writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.configuration import reference


class Command(BaseCommand):
    help = "Write docs/configuration.md from portal/configuration.py (--check: only say whether it is current)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "docs" / "configuration.md"))
        parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from the declaration")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["output"])
        page = reference()
        if options["check"]:
            if not path.exists() or path.read_text() != page:
                raise CommandError(f"{path} is not what portal/configuration.py declares: run manage.py settings_reference.")
            self.stdout.write(f"{path} is current.")
            return
        path.write_text(page)
        self.stdout.write(f"Wrote {path}.")
