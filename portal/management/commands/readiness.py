"""Readiness for processes without a web server (the worker, beat, the watch sync): the checks
of /readyz, for an exec probe. Exit 0 when ready; else 1, each problem on a line of stderr."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.health import readiness_problems

KNOWN = ("database", "broker", "worker", "beat", "watcher")


class Command(BaseCommand):
    help = "Exit 0 if the portal's database and broker (or the named checks) answer; else 1 with the reasons."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--checks", default="database,broker",
                            help=f"comma-separated, of {', '.join(KNOWN)} (default: database,broker)")

    def handle(self, *args: Any, **options: Any) -> None:
        checks = [name.strip() for name in options["checks"].split(",") if name.strip()]
        unknown = [name for name in checks if name not in KNOWN]
        if unknown:
            raise CommandError(f"unknown check {', '.join(unknown)}; the checks are {', '.join(KNOWN)}")
        problems = readiness_problems(checks)
        if problems:
            raise CommandError("not ready: " + "; ".join(problems))
        self.stdout.write("ready")
