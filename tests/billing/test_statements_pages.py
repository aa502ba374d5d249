"""The statement pages and downloads: finance closes and adjusts; a lead reads and downloads only
their team's part; another team's statement or part is 404 on every page and download."""

from __future__ import annotations

import datetime as dt
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from django.urls import reverse

from billing.models import Adjustment, Statement
from billing.statements.services import statement_close
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
OCTOBER = "2026-10"


@pytest.fixture
def h100(db):
    return FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)


@pytest.fixture
def october(finance_user, team, other_team, h100):
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=36000, rate=price)
    usage(account=account(other_team), flavor=h100, hour=dt.datetime(2026, 10, 9, 4, tzinfo=UTC), unit_seconds=7200,
          rate=price, borrowed=True)
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))


def url(name: str, month: str = OCTOBER, team: str | None = None) -> str:
    return reverse(f"billing:{name}", args=[month]) + (f"?team={team}" if team else "")


def test_finance_closes_a_month_from_the_form_and_lands_on_the_statement(finance_user, team, h100, as_user):
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 1, 3, 4, tzinfo=UTC), unit_seconds=3600, rate=price)
    client = as_user(finance_user)

    preview = client.post(reverse("billing:statement-close"), {"month": "2026-01"}, HTTP_HX_REQUEST="true")
    body = preview.content.decode()
    assert preview.status_code == 200 and "HX-Redirect" not in preview
    assert "Closing January 2026 is for good" in body and 'data-testid="preview-charged">2.00 USD<' in body
    assert "Vision" in body and 'name="confirmed" value="1"' in body
    assert not Statement.objects.exists()  # nothing is closed until it is confirmed

    response = client.post(reverse("billing:statement-close"), {"month": "2026-01", "confirmed": "1"},
                           HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/billing/statements/2026-01/"
    page = client.get(response["HX-Redirect"]).content.decode()
    assert "Statement January 2026" in page and "2.00 USD" in page
    assert "January 2026" in client.get(reverse("billing:statement-list")).content.decode()


@pytest.mark.parametrize(("month", "words"), [
    ("2999-01", "January 2999 has not ended yet in the billing time zone (UTC)"),
    ("october", "“october” is not a month; write it as YYYY-MM"),
    ("2026-13", "“2026-13” is not a month"),
])
def test_a_refused_close_is_shown_in_words_in_the_form(finance_user, as_user, month, words):
    response = as_user(finance_user).post(reverse("billing:statement-close"), {"month": month}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200  # htmx swaps only a 200: the form comes back with the refusal in it
    body = response.content.decode()
    assert words in body.replace("&#x27;", "'").replace("&quot;", '"')
    assert 'id="close-form"' in body and "<html" not in body  # just the fragment
    assert not Statement.objects.exists()


def test_closing_a_closed_month_again_is_refused_in_the_form(october, finance_user, as_user):
    response = as_user(finance_user).post(reverse("billing:statement-close"), {"month": OCTOBER})
    assert response.status_code == 400
    assert "October 2026 was already closed by fiona" in response.content.decode()


def test_leads_and_members_cannot_close_a_month(lead, member, as_user):
    for user in (lead, member):
        assert as_user(user).post(reverse("billing:statement-close"), {"month": "2026-01"}).status_code == 403
    assert not Statement.objects.exists()


def test_finance_sees_every_team_and_the_unallocated_and_a_lead_only_their_team(october, finance_user, lead, as_user):
    whole = as_user(finance_user).get(url("statement-detail")).content.decode()
    assert "Vision" in whole and "Speech" in whole and "Add an adjustment" in whole

    own = as_user(lead).get(url("statement-detail")).content.decode()
    assert "Vision" in own and "Speech" not in own and "Add an adjustment" not in own
    assert "20.00 USD" in own  # 10 GPU-hours at 2.00; the statement's 24.00 is not the lead's to read


def test_a_member_or_a_lead_of_a_team_not_on_the_statement_gets_404_everywhere(october, member, as_user):
    stranger = UserFactory.create(username="stan")
    MembershipFactory(team=TeamFactory.create(slug="robotics"), user=stranger, role="lead")
    for user in (member, stranger):
        client = as_user(user)
        for name in ("statement-detail", "statement-csv", "statement-pdf"):
            assert client.get(url(name)).status_code == 404, (user, name)
            assert client.get(url(name, team="vision")).status_code == 404, (user, name)


def test_a_lead_asking_for_another_teams_part_gets_404_on_page_and_downloads(october, lead, as_user):
    client = as_user(lead)
    for name in ("statement-detail", "statement-csv", "statement-pdf"):
        assert client.get(url(name, team="speech")).status_code == 404, name
        assert client.get(url(name, team="no-such-team")).status_code == 404, name
    assert client.get(url("statement-detail", month="2026-09")).status_code == 404
    assert client.get(url("statement-detail", month="garbage")).status_code == 404


def test_the_csv_is_the_same_bytes_on_every_download_and_named_by_month_and_team(october, finance_user, lead, as_user):
    client = as_user(finance_user)
    first, second = client.get(url("statement-csv")), client.get(url("statement-csv"))

    assert first.content == second.content
    assert first["Content-Disposition"] == 'attachment; filename="statement-2026-10.csv"'
    rows = first.content.decode().splitlines()
    assert rows[0] == ("record,month,currency,team,team_name,cost_center,flavor,flavor_name,period_start,period_end,"
                       "gpu_fraction,guaranteed_unit_seconds,borrowed_unit_seconds,guaranteed_gpu_hours,borrowed_gpu_hours,"
                       "price_per_gpu_hour,amount,reason,adjusted_by,adjusted_at,kwh,kg_co2e,priced_per,borrowed_discount_percent,department")
    assert rows[1] == ("usage,2026-10,USD,speech,Speech,CC-100,h100-80gb,H100 80GB,2026-10-01T00:00:00+00:00,"
                       "2026-11-01T00:00:00+00:00,1/1,0,7200,0.000000,2.000000,2.0000,4.00,,,,,,gpu_hour,0.00,")
    assert rows[2].startswith("usage,2026-10,USD,vision,Vision,CC-100,h100-80gb,H100 80GB,") and rows[2].endswith(
        ",1/1,36000,0,10.000000,0.000000,2.0000,20.00,,,,,,gpu_hour,0.00,")
    assert rows[-1] == "total_unallocated,2026-10,USD,,,,,,,,,,,,,,0.00,,,,,,,,"
    assert "total_charged,2026-10,USD,,,,,,,,,,,,,,24.00,,,,,,,," in rows

    own = as_user(lead).get(url("statement-csv", team="vision"))
    assert own["Content-Disposition"] == 'attachment; filename="statement-2026-10-vision.csv"'
    text = own.content.decode()
    assert "speech" not in text and "total_charged,2026-10,USD,,,,,,,,,,,,,,20.00,,," in text
    assert "total_unallocated" not in text


def test_a_team_with_no_usage_in_the_month_gets_a_fee_and_is_then_on_the_statement(october, finance_user, as_user):
    TeamFactory.create(slug="robotics", name="Robotics")
    client = as_user(finance_user)
    page = client.get(url("statement-detail")).content.decode()
    assert '<option value="robotics">robotics · Robotics</option>' in page

    done = client.post(url("adjustment-add"), {"team": "robotics", "amount": "150", "reason": "Support contract, October"},
                       HTTP_HX_REQUEST="true")

    body = done.content.decode()
    assert done.status_code == 200 and "Support contract, October" in body
    assert 'data-testid="total">174.00 USD<' in body  # 24.00 of lines and the fee
    (adjustment,) = Adjustment.objects.all()
    assert adjustment.account.slug == "robotics" and adjustment.amount == Decimal("150.00")
    listed = client.get(reverse("billing:statement-list")).content.decode()
    assert 'data-testid="statement-total">174.00</span> USD' in listed
    csv_rows = client.get(url("statement-csv")).content.decode().splitlines()
    assert "team_total,2026-10,USD,robotics,Robotics,CC-100,,,,,,,,,,,150.00,,,,,,,," in csv_rows


def test_an_adjustment_added_through_the_page_shows_and_refusals_come_back_in_words(october, finance_user, as_user):
    client = as_user(finance_user)
    post = url("adjustment-add")

    refused = client.post(post, {"team": "vision", "amount": "lots", "reason": "x"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 200
    assert "“lots” is not an amount" in refused.content.decode() and "<html" not in refused.content.decode()
    no_reason = client.post(post, {"team": "vision", "amount": "-5", "reason": ""}, HTTP_HX_REQUEST="true")
    assert "An adjustment needs a reason" in no_reason.content.decode()
    unknown = client.post(post, {"team": "robotics", "amount": "-5", "reason": "x"}, HTTP_HX_REQUEST="true")
    assert "There is no team “robotics”." in unknown.content.decode()
    assert not Adjustment.objects.exists()

    done = client.post(post, {"team": "vision", "amount": "-4.50", "reason": "GPU 3 broken on the 12th"},
                       HTTP_HX_REQUEST="true")
    body = done.content.decode()
    assert done.status_code == 200 and "GPU 3 broken on the 12th" in body
    assert 'data-testid="total">19.50 USD' in body
    assert Adjustment.objects.get().amount == Decimal("-4.50")
    csv_rows = client.get(url("statement-csv")).content.decode().splitlines()
    assert any(row.startswith("adjustment,2026-10,USD,vision,Vision,CC-100,") and ",-4.50,GPU 3 broken on the 12th,fiona,"
               in row for row in csv_rows)


def test_without_htmx_a_refused_adjustment_is_a_400_page_with_the_sentence(october, finance_user, as_user):
    response = as_user(finance_user).post(url("adjustment-add"), {"team": "vision", "amount": "1e99", "reason": "x"})
    assert response.status_code == 400
    assert "An amount in USD is at most 999,999,999,999,999.99; “1e99” is more." in response.content.decode()
    assert not Adjustment.objects.exists()


def test_a_lead_cannot_add_an_adjustment(october, lead, as_user):
    response = as_user(lead).post(url("adjustment-add"), {"team": "vision", "amount": "-100", "reason": "please"})
    assert response.status_code == 403
    assert not Adjustment.objects.exists()


def test_the_pdf_renders_a_page_that_is_not_blank(october, finance_user, as_user, tmp_path: Path):
    response = as_user(finance_user).get(url("statement-pdf"))

    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"] == 'attachment; filename="statement-2026-10.pdf"'
    pdf = tmp_path / "statement.pdf"
    pdf.write_bytes(response.content)
    assert pages_rendered(pdf) == 3  # the summary with the chart, then one page per team
    assert dark_fraction(tmp_path / "page-1.pgm") > 0.005


def test_a_lead_downloads_their_teams_pdf(october, lead, as_user, tmp_path: Path):
    response = as_user(lead).get(url("statement-pdf", team="vision"))
    assert response["Content-Disposition"] == 'attachment; filename="statement-2026-10-vision.pdf"'
    pdf = tmp_path / "vision.pdf"
    pdf.write_bytes(response.content)
    assert pages_rendered(pdf) == 2


def pages_rendered(pdf: Path) -> int:
    """Renders every page to a grayscale image with poppler's pdftoppm; the number of pages."""
    subprocess.run(["pdftoppm", "-gray", "-r", "50", str(pdf), str(pdf.parent / "page")], check=True, timeout=60)
    return len(list(pdf.parent.glob("page-*.pgm")))


def dark_fraction(pgm: Path) -> float:
    """The share of pixels that are not white: a blank page has none."""
    data = pgm.read_bytes()
    # P5 header: magic, width, height, maxval, each followed by whitespace, then the pixels.
    magic, width, height, maxval, pixels = data.split(maxsplit=4)
    assert magic == b"P5" and int(maxval) == 255
    count = int(width) * int(height)
    body = pixels[:count]
    return sum(1 for value in body if value < 200) / count


def test_a_reason_that_looks_like_a_formula_is_not_a_formula_in_the_csv(october, finance_user, as_user):
    client = as_user(finance_user)
    client.post(url("adjustment-add"), {"team": "vision", "amount": "-1", "reason": '=HYPERLINK("http://evil","x")'})
    rows = client.get(url("statement-csv")).content.decode().splitlines()
    (adjustment,) = [row for row in rows if row.startswith("adjustment,")]
    assert ',"\'=HYPERLINK(""http://evil"",""x"")",fiona,' in adjustment
    assert ",-1.00," in adjustment  # amounts keep their sign
