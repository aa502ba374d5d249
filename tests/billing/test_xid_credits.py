"""Credits for GPU time after hardware XIDs: each pod-second credited once, never more than billed,
and shown on the team's usage page before the month closes (issue 22 §2)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest

from billing import metering
from billing.models import Adjustment
from billing.statements import xid_credits
from billing.statements.selectors import statement_picture
from billing.statements.services import statement_close
from billing.usage import selectors
from jobs.models import GpuXidEvent
from tests.billing.factories import account, rate
from tests.billing.metering_helpers import make_interval, make_workload

pytestmark = pytest.mark.django_db
UTC = dt.UTC
CLOSE = dt.datetime(2026, 11, 2, tzinfo=UTC)


def at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 10, day, hour, minute, tzinfo=UTC)


def xid(pod, gpu: str, code: int, when: dt.datetime) -> GpuXidEvent:
    return GpuXidEvent.objects.create(workload=pod.workload, pod_name=pod.pod_name, gpu=gpu, code=code, hardware=True,
                                      at=when)


def closed(finance_user):
    metering.rollups_refresh()
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=CLOSE)


def test_two_hardware_xids_on_a_two_gpu_pod_credit_its_time_after_the_first_once(team, member, flavor, finance_user):
    # 2 GPUs from 08:00 to 14:00 at 2.00 = 24.00 billed; XIDs at 11:00 and 12:00: 3 h × 2 GPUs × 2.00 = 12.00.
    # Crediting each XID's aftermath on the whole pod gave 12.00 + 8.00 = 20.00 (issue: 19.00 of 10.00).
    rate(flavor, "2.00", effective_from=at(1, 0))
    pod = make_interval(make_workload(team=team, owner=member, flavor=flavor, units=2), at(10, 8), at(10, 14))
    xid(pod, "GPU-0", 79, at(10, 11))
    xid(pod, "GPU-1", 48, at(10, 12))

    statement = closed(finance_user)

    (credit,) = Adjustment.objects.filter(statement=statement)
    assert credit.amount == Decimal("-12.00")
    assert "after XID 79 on GPU-0 at 2026-10-10 11:00 UTC" in credit.reason and "then 1 more: XID 48 on GPU-1" in credit.reason


def test_an_xid_on_each_gpu_of_an_eight_gpu_pod_never_credits_more_than_was_billed(team, member, flavor, finance_user):
    # 8 GPUs for 6 h at 2.00 = 96.00 billed; XID 74 on every GPU at 08:00: the whole run, once: 96.00, not 8 × 96.00.
    rate(flavor, "2.00", effective_from=at(1, 0))
    pod = make_interval(make_workload(team=team, owner=member, flavor=flavor, units=8), at(10, 8), at(10, 14))
    for gpu in range(8):
        xid(pod, f"GPU-{gpu}", 74, at(10, 8))

    statement = closed(finance_user)

    (credit,) = Adjustment.objects.filter(statement=statement)
    assert credit.amount == Decimal("-96.00")
    (section,) = statement_picture(user=finance_user, statement=statement).teams
    assert (section.charged, section.total) == (Decimal("96.00"), Decimal("0.00"))


def test_credits_are_cut_to_what_the_month_bills_and_say_so(team):
    vision = account(team)
    credits = [(vision, Fraction(640), "Credit: pod a"), (vision, Fraction(10), "Credit: pod b")]
    (only,) = xid_credits.capped(credits, billed={vision.pk: Decimal("96.00")}, currency="USD")
    assert only[1] == Decimal("-96.00") and only[2].endswith("cut to 96.00 USD, what is left of the month's bill")


def test_the_team_page_shows_the_credit_a_month_under_way_has_gathered(team, member, flavor, as_user):
    rate(flavor, "2.00", effective_from=at(1, 0))
    pod = make_interval(make_workload(team=team, owner=member, flavor=flavor, units=2), at(10, 8), at(10, 14))
    xid(pod, "GPU-0", 79, at(10, 11))
    metering.rollups_refresh()

    usage = selectors.team_month_usage(team=team, month=dt.date(2026, 10, 1), now=at(20, 0))

    assert (usage.total.cost, usage.xid_credit) == (Decimal("24.00"), Decimal("-12.00"))
    assert account(team) == usage.account
    page = as_user(member).get(f"/billing/teams/{team.slug}/?month=2026-10").content.decode()
    assert 'data-testid="xid-credit">-12.00 USD</span> of credit for GPU time after hardware XIDs' in page
