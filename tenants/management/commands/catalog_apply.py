"""Loads the GPU catalog an install declares: a YAML (or JSON) list of flavors, from a file or an
environment variable (the chart's hook Job passes its `catalog` value as PORTAL_CATALOG)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.errors import DomainError
from tenants import services


class Command(BaseCommand):
    help = ("Create or update the flavors a catalog file lists (by slug; others are left alone), each from a preset "
            "or its own fields, through the catalog's checks and audit. All or nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("path", nargs="?", help="a YAML or JSON file holding a list of flavors")
        source.add_argument("--env", metavar="NAME", help="read the list from this environment variable instead")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["env"]:
            name = options["env"]
            if name not in os.environ:
                raise CommandError(f"The environment variable {name} is not set.")
            text, origin = os.environ[name], name
        else:
            path = Path(options["path"])
            try:
                text, origin = path.read_text(), str(path)
            except OSError as error:
                raise CommandError(f"Cannot read the catalog file {path}: {error.strerror}.") from None
        try:
            entries = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise CommandError(f"{origin} is not YAML or JSON: {error}") from None
        try:
            done = services.catalog_apply(entries=entries or [])
        except DomainError as refusal:
            raise CommandError(f"Nothing was changed. {refusal.message}") from None
        for line in done:
            self.stdout.write(line)
        self.stdout.write(f"Catalog applied from {origin}: {len(done)} flavors.")
