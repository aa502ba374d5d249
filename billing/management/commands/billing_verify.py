"""Recomputes a period's usage rollups from the run intervals and compares them exactly.

    manage.py billing_verify --month 2026-10
    manage.py billing_verify --start 2026-10-01T00:00 --end 2026-10-08T00:00

Exits 0 when they are equal to the unit-second, 1 with each difference in words otherwise. It
only reads: the rollup task (or `billing.metering.rollups_refresh`) is what writes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from billing import metering
from billing.periods import billing_zone, month_bounds, month_parse


def _month(text: str) -> tuple[dt.datetime, dt.datetime]:
    month = month_parse(text)
    if month is None:
        raise CommandError(f"“{text}” is not a month; give it as YYYY-MM, e.g. 2026-10.")
    return month_bounds(month)


def _instant(text: str, name: str) -> dt.datetime:
    value = parse_datetime(text)
    if value is None:
        raise CommandError(f"--{name} “{text}” is not a date and time; give it as 2026-10-01T00:00.")
    return value if value.tzinfo else value.replace(tzinfo=billing_zone())


class Command(BaseCommand):
    help = "Recompute a period's usage from run intervals and compare it to the rollups exactly."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--month", help="A month of the billing time zone, YYYY-MM.")
        parser.add_argument("--start", help="The period's start (billing time zone unless it says otherwise).")
        parser.add_argument("--end", help="The period's end, excluded.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["month"] and (options["start"] or options["end"]):
            raise CommandError("Give either --month or --start and --end, not both.")
        if options["month"]:
            start, end = _month(options["month"])
        elif options["start"] and options["end"]:
            start, end = _instant(options["start"], "start"), _instant(options["end"], "end")
        else:
            raise CommandError("Give the period: --month YYYY-MM, or --start and --end.")
        if end <= start:
            raise CommandError("The period's end must come after its start.")
        differences = metering.recompute(start=start, end=end)
        pending = metering.pending(start=start, end=end)
        if pending:
            self.stdout.write(f"Note: {pending} run interval(s) in the period changed since the last refresh; "
                              f"the next refresh folds them in.")
        if differences:
            for line in differences:
                self.stdout.write(line)
            raise CommandError(f"{len(differences)} difference(s) between the rollups and a recomputation "
                               f"of {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}.", returncode=1)
        self.stdout.write(f"The rollups of {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} equal a recomputation "
                          f"from the run intervals.")
