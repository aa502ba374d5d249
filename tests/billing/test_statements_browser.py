"""The finance journey's end in a real browser: finance tries to close the month still running
(refused in words), closes last month, corrects it with a credit without a reload, and downloads
the CSV and the PDF; the CSV is the server's bytes and the PDF renders to a page that is not blank.

PostgreSQL only (marker `services` too): a closed statement cannot be deleted, so the live
server's tables are emptied the way PostgreSQL does it (TRUNCATE), which SQLite's triggers refuse.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest
from django.db import connection

from billing import periods
from billing.models import Statement
from billing.statements import selectors as statement_selectors
from billing.statements.exports import statement_csv
from portal.models import User
from tests.billing.factories import account, rate, usage
from tests.billing.test_statements_pages import dark_fraction, pages_rendered
from tests.browsing import SHOTS, htmx_settled, log_in, sync_api
from tests.factories import FlavorFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def last_month(db) -> dt.date:
    if connection.vendor != "postgresql":
        pytest.fail("This test needs PostgreSQL: run it through scripts/with-services.sh (as `make test` does)")
    this_month = periods.current_month()
    previous = periods.month_start(this_month - dt.timedelta(days=1))
    start, _ = periods.month_bounds(previous)
    UserFactory.create(username="fiona", is_finance=True)
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    price = rate(h100, "2.00", effective_from=start - dt.timedelta(days=30))
    for slug, name, seconds in (("vision", "Computer Vision", 36000), ("nlp", "Language Models", 7200)):
        team = TeamFactory.create(slug=slug, name=name)
        usage(account=account(team), flavor=h100, hour=start + dt.timedelta(days=2, hours=3), unit_seconds=seconds,
              rate=price)
    return previous


def test_finance_closes_last_month_adjusts_it_and_downloads_csv_and_pdf(browser, live_server, last_month, tmp_path: Path):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    fiona = log_in(browser, live_server, "fiona")

    fiona.click("nav >> text=Statements")
    expect(fiona.locator("#id_month")).to_have_value(f"{last_month:%Y-%m}")
    this_month = periods.current_month()
    fiona.fill("#id_month", f"{this_month:%Y-%m}")
    fiona.click("button:has-text('Review and close')")
    expect(fiona.locator("[data-testid=close-error]")).to_contain_text(f"{this_month:%B %Y} has not ended yet")
    assert not Statement.objects.exists()

    fiona.fill("#id_month", f"{last_month:%Y-%m}")
    fiona.click("button:has-text('Review and close')")
    expect(fiona.locator("[data-testid=preview-charged]")).to_have_text("24.00 USD")
    assert not Statement.objects.exists()
    fiona.click("[data-testid=close-confirm]")
    fiona.wait_for_url(f"**/billing/statements/{last_month:%Y-%m}/")
    expect(fiona.locator(".flash.success")).to_contain_text(f"Closed {last_month:%B %Y}: 24.00 USD charged to teams")
    expect(fiona.locator("[data-testid=total]")).to_have_text("24.00 USD")
    expect(fiona.locator("[data-testid=team-section]")).to_have_count(2)

    fiona.evaluate("window.__noReload = 1")
    fiona.select_option("#id_team", "vision")
    fiona.fill("#id_amount", "-4.50")
    fiona.fill("#id_reason", "GPU 3 was broken for 2.25 hours")
    fiona.click("button:has-text('Add adjustment')")
    htmx_settled(fiona)
    expect(fiona.locator("[data-testid=total]")).to_have_text("19.50 USD")
    expect(fiona.locator("[data-testid=adjustment-rows]")).to_contain_text("GPU 3 was broken for 2.25 hours")
    # The team's own section follows too: its lines and the adjustment add up to its total, as in the CSV.
    vision = fiona.locator("[data-testid=team-section]", has_text="Computer Vision")
    expect(vision.locator("[data-testid=adjustment-line]")).to_contain_text("GPU 3 was broken")
    expect(vision.locator("[data-testid=team-total]")).to_have_text("15.50")
    assert fiona.evaluate("window.__noReload") == 1  # htmx swapped the fragment; the page did not reload
    fiona.screenshot(path=str(SHOTS / "statement.png"), full_page=True)

    with fiona.expect_download() as csv_download:
        fiona.click("[data-testid=download-csv]")
    assert csv_download.value.suggested_filename == f"statement-{last_month:%Y-%m}.csv"
    downloaded = Path(csv_download.value.path()).read_bytes()
    statement = Statement.objects.get()
    finance = User.objects.get(username="fiona")
    assert downloaded == statement_csv(statement_selectors.statement_picture(user=finance, statement=statement))
    assert b"adjustment," in downloaded and b"total_charged" in downloaded

    with fiona.expect_download() as pdf_download:
        fiona.click("[data-testid=download-pdf]")
    assert pdf_download.value.suggested_filename == f"statement-{last_month:%Y-%m}.pdf"
    pdf = tmp_path / "statement.pdf"
    pdf.write_bytes(Path(pdf_download.value.path()).read_bytes())
    assert pages_rendered(pdf) == 3
    assert dark_fraction(tmp_path / "page-1.pgm") > 0.005
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    assert "Total charged" in text and "19.50 USD" in text
