"""A closed statement as files for accounting: CSV and PDF, of every team or of one.

The CSV is a pure function of the statement's content: a fixed column order, rows in an order
that uses no database id, instants in the billing zone, amounts at the currency's minor unit and
nothing about when or by whom it was downloaded. Every download of a closed statement is the same
bytes, and closing the same usage again (in a fresh database) gives the same bytes too.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from django.http import HttpResponse
from django.template.loader import render_to_string

from billing.models import StatementLine
from billing.statements.selectors import StatementPicture, department_totals, flavor_totals

COLUMNS = [
    "record", "month", "currency", "team", "team_name", "cost_center", "flavor", "flavor_name", "period_start",
    "period_end", "gpu_fraction", "guaranteed_unit_seconds", "borrowed_unit_seconds", "guaranteed_gpu_hours",
    "borrowed_gpu_hours", "price_per_gpu_hour", "amount", "reason", "adjusted_by", "adjusted_at", "kwh", "kg_co2e",
    "priced_per", "borrowed_discount_percent", "department",
]
# Free text a person typed (a reason, a team's name): a spreadsheet would run a cell that starts
# like a formula, so such a cell gets a leading apostrophe (OWASP's advice for CSV injection).
TEXT_COLUMNS = {"team", "team_name", "cost_center", "flavor", "flavor_name", "reason", "adjusted_by", "department"}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
PRICE = Decimal("0.0001")
# The PDF's layout lives beside this module, not in a <style> element: no page template carries one.
PDF_STYLE = Path(__file__).with_name("statement_pdf.css")
HOURS = Decimal("0.000001")


def download(body: bytes, content_type: str, name: str) -> HttpResponse:
    """A file to save, for the page's download and the API's alike."""
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def filename(picture: StatementPicture, extension: str, team: str | None = None) -> str:
    """statement-2026-10.csv, or statement-2026-10-vision.pdf for one team."""
    return f"statement-{picture.statement.slug}{f'-{team}' if team else ''}.{extension}"


def _instant(value: dt.datetime, zone: ZoneInfo) -> str:
    return value.astimezone(zone).isoformat(timespec="seconds")


def statement_csv(picture: StatementPicture) -> bytes:
    """One row per line, then per adjustment, then the totals (per team, per department where any
    team was in one, then the whole)."""
    statement = picture.statement
    zone = ZoneInfo(statement.time_zone)
    money = picture.money
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    head = {"month": statement.slug, "currency": statement.currency}

    def row(**values: object) -> None:
        writer.writerow([_cell(column, values.get(column)) for column in COLUMNS])

    for line in [line for team in picture.teams for line in team.lines] + picture.unallocated:
        row(**head, **_line_values(line, zone, money))
    for team in picture.teams:
        for adjustment in team.adjustments:
            row(**head, record="adjustment", team=adjustment.account_slug, team_name=adjustment.account_name,
                cost_center=adjustment.cost_center, department=adjustment.department, amount=money(adjustment.amount),
                reason=adjustment.reason,
                adjusted_by=adjustment.created_by_name, adjusted_at=_instant(adjustment.created_at, zone))
    for team in picture.teams:
        if team.energy is not None:
            row(**head, record="energy", team=team.slug, team_name=team.name, cost_center=team.cost_center,
                department=team.department, kwh=team.energy.kwh, kg_co2e=team.energy.kg_co2e)
    for team in picture.teams:
        row(**head, record="team_total", team=team.slug, team_name=team.name, cost_center=team.cost_center,
            department=team.department, amount=money(team.total))
    for department in department_totals(picture):  # the teams in none on a line with an empty department
        row(**head, record="department_total", department=department.department, amount=money(department.total))
    row(**head, record="total_lines", amount=money(picture.charged))
    row(**head, record="total_adjustments", amount=money(picture.adjusted))
    row(**head, record="total_charged", amount=money(picture.total))
    if picture.whole:
        row(**head, record="total_unallocated", amount=money(picture.unallocated_total))
    if picture.energy:
        row(**head, record="total_energy", kwh=picture.kwh, kg_co2e=picture.kg_co2e)
    return out.getvalue().encode("utf-8")


def _line_values(line: StatementLine, zone: ZoneInfo, money: Callable[[Decimal], Decimal]) -> dict[str, object]:
    return {"record": line.kind, "team": line.account_slug, "team_name": line.account_name, "cost_center": line.cost_center,
            "department": line.department,
            "flavor": line.flavor_slug, "flavor_name": line.flavor_name, "period_start": _instant(line.period_start, zone),
            "period_end": _instant(line.period_end, zone),
            "gpu_fraction": f"{line.fraction_numerator}/{line.fraction_denominator}",
            "guaranteed_unit_seconds": line.guaranteed_unit_seconds, "borrowed_unit_seconds": line.borrowed_unit_seconds,
            "guaranteed_gpu_hours": line.guaranteed_gpu_hours.quantize(HOURS),
            "borrowed_gpu_hours": line.borrowed_gpu_hours.quantize(HOURS),
            "price_per_gpu_hour": None if line.price_per_gpu_hour is None else line.price_per_gpu_hour.quantize(PRICE),
            "amount": money(line.amount),
            # A CPU-only flavor's line (gpu_fraction 0/1) has no GPU-hours: its price is per unit-hour.
            "priced_per": "unit_hour" if line.per_unit_hour else "gpu_hour",
            "borrowed_discount_percent": line.borrowed_discount_percent}


def _cell(column: str, value: object) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if column in TEXT_COLUMNS and text.startswith(FORMULA_STARTS) else text


def statement_pdf(picture: StatementPicture) -> bytes:
    """The statement as a PDF: totals and a chart first, then one section per team."""
    from weasyprint import CSS, HTML  # imported here: loading Pango costs a second the other requests never need

    html = render_to_string("billing/statement_pdf.html", {"picture": picture, "chart": team_chart(picture),
                                                           "flavors": flavor_totals(picture),
                                                           "departments": department_totals(picture)})
    return HTML(string=html).write_pdf(stylesheets=[CSS(filename=str(PDF_STYLE))])


def team_chart(picture: StatementPicture, *, width: int = 640, bar: int = 18, most: int = 25) -> dict[str, object]:
    """A horizontal bar per team (the `most` largest totals), as numbers the SVG template draws."""
    teams = sorted(picture.teams, key=lambda team: (-team.total, team.slug))[:most]
    largest = max((team.total for team in teams if team.total > 0), default=Decimal(1))
    label_width, gap = 160, 6
    room = width - label_width - 90
    bars = [{"label": team.slug, "y": index * (bar + gap), "text_y": index * (bar + gap) + bar - 5,
             "width": max(int(room * team.total / largest), 1) if team.total > 0 else 0,
             "value": f"{picture.money(team.total)}", "value_x": label_width + gap + (
                 max(int(room * team.total / largest), 1) if team.total > 0 else 0) + gap}
            for index, team in enumerate(teams)]
    return {"width": width, "height": max(len(bars), 1) * (bar + gap), "bar": bar, "label_width": label_width,
            "bar_x": label_width + gap, "bars": bars, "left_out": max(len(picture.teams) - most, 0)}
