"""The ledger: lent hours, unallocated capacity and the shared idle capacity, with conservation
(teams + unallocated = capacity) checked exactly, and to 0.1 % where the sync lagged."""

from __future__ import annotations

import datetime as dt
import random
from fractions import Fraction

import pytest
from django.core.exceptions import PermissionDenied

from billing import ledger, metering
from billing.models import IdlePolicy
from billing.rates import services
from portal.errors import DomainError
from tests.billing.metering_helpers import account, at, make_interval, make_workload, total
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db
HOUR = (at("2026-10-06 10:00"), at("2026-10-06 11:00"))


def test_lent_is_split_by_idle_guarantee_and_adds_up_exactly():
    assert ledger.split_lent(borrowed=10_800, idle_by_lender={1: 10_800, 2: 7_200}) == {1: 6_480, 2: 4_320}
    # 10 split three ways is 3⅓ each: the one left over goes to the smaller id.
    assert ledger.split_lent(borrowed=10, idle_by_lender={3: 10, 1: 10, 2: 10}) == {1: 4, 2: 3, 3: 3}
    # Borrowing beyond every lender's idle guarantee came from capacity nobody was guaranteed.
    assert ledger.split_lent(borrowed=100, idle_by_lender={1: 30, 2: 0}) == {1: 30}
    assert ledger.split_lent(borrowed=0, idle_by_lender={1: 30}) == {}


def test_idle_is_shared_by_guarantee_and_the_shares_add_up_to_it():
    shares = ledger.share_idle(idle=100, weights={1: 2, 2: 1, 3: 0})
    assert shares == {1: Fraction(200, 3), 2: Fraction(100, 3)}
    assert sum(shares.values()) == 100
    assert ledger.share_idle(idle=100, weights={}) == {}  # nobody guaranteed: it stays unallocated


@pytest.fixture
def site(db):
    """H100 × 8. Vision is guaranteed 4 and uses 1; Speech is guaranteed 2 and idle; Audio has no
    guarantee and borrows 3; Robots (guaranteed 2, not lending) uses 1 on its own quota. One hour."""
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision, speech, audio = (TeamFactory.create(slug=s, name=s.title()) for s in ("vision", "speech", "audio"))
    robots = TeamFactory.create(slug="robots", name="Robots", lends_idle=False)
    for team, units in ((vision, 4), (speech, 2), (robots, 2)):
        QuotaGrantFactory.create(team=team, flavor=h100, units=units, valid_from=at("2026-09-01 00:00"))
    alice = UserFactory.create(username="alice")
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=1), *HOUR)
    make_interval(make_workload(team=audio, owner=alice, flavor=h100, units=3, on_borrowed=True), *HOUR)
    make_interval(make_workload(team=robots, owner=alice, flavor=h100, units=1), *HOUR)
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=HOUR[1])
    return h100, vision, speech, audio, robots


def test_the_golden_hour_lent_unallocated_and_shared(site):
    h100, vision, speech, audio, robots = site
    capacity = 8 * 3600
    used = 3600 + 3 * 3600 + 3600
    assert ledger.capacity(start=HOUR[0], end=HOUR[1]) == {h100.pk: capacity}
    assert ledger.unallocated(start=HOUR[0], end=HOUR[1]) == {h100.pk: capacity - used}

    # Idle guarantees of the lenders: Vision 4 − 1 = 3 GPUs, Speech 2; Robots does not lend.
    # Audio borrowed 3 GPU-hours: Vision lent 3 × 3/5, Speech 3 × 2/5.
    assert ledger.lent(start=HOUR[0], end=HOUR[1]) == {
        (account(vision).pk, h100.pk): 6_480, (account(speech).pk, h100.pk): 4_320}
    assert ledger.lent(start=HOUR[0], end=HOUR[1], account_ids=[account(speech).pk]) == {
        (account(speech).pk, h100.pk): 4_320}
    assert total(borrowed=True) == 10_800

    # Shown apart by default: nobody takes on the idle capacity.
    assert ledger.idle_shares(start=HOUR[0], end=HOUR[1]) == {}
    IdlePolicy.objects.create(flavor=h100, mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE)
    shares = ledger.idle_shares(start=HOUR[0], end=HOUR[1])
    # 3 idle GPU-hours by guarantee 4 : 2 : 2.
    assert shares == {(account(vision).pk, h100.pk): 5_400, (account(speech).pk, h100.pk): 2_700,
                      (account(robots).pk, h100.pk): 2_700}
    assert total() + sum(shares.values()) == capacity


def test_conservation_holds_exactly_over_a_busy_week_and_with_shared_idle(db):
    rng = random.Random(9)
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=64)
    mig = FlavorFactory.create(name="A100 1g", slug="a100-1g", resource_name="nvidia.com/mig-1g.10gb",
                               fraction_denominator=7, capacity_units=56)
    IdlePolicy.objects.create(flavor=mig, mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE)
    teams = [TeamFactory.create(slug=f"team-{n}", name=f"Team {n}") for n in range(5)]
    for team in teams:
        for flavor in (h100, mig):
            QuotaGrantFactory.create(team=team, flavor=flavor, units=rng.randint(1, 8), valid_from=at("2026-09-01 00:00"))
    alice = UserFactory.create(username="alice")
    start = at("2026-10-05 00:00")
    for _ in range(120):
        flavor, team = rng.choice((h100, mig)), rng.choice(teams)
        begin = start.timestamp() + rng.randint(0, 6 * 86400)
        length = rng.randint(10, 20 * 3600)
        make_interval(make_workload(team=team, owner=alice, flavor=flavor, units=rng.randint(1, 2),
                                    on_borrowed=rng.random() < 0.3),
                      dt.datetime.fromtimestamp(begin, tz=dt.UTC),
                      dt.datetime.fromtimestamp(begin + length + rng.random(), tz=dt.UTC))
    metering.rollups_refresh(until=start)
    metering.rollups_refresh(until=at("2026-10-12 00:00"))
    week = (start, at("2026-10-12 00:00"))

    capacity = ledger.capacity(start=week[0], end=week[1])
    unallocated = ledger.unallocated(start=week[0], end=week[1])
    shares = ledger.idle_shares(start=week[0], end=week[1])
    for flavor in (h100, mig):
        used = total(flavor=flavor, hour__gte=week[0], hour__lt=week[1])
        assert capacity[flavor.pk] == flavor.capacity_units * 7 * 86400
        assert used + unallocated[flavor.pk] == capacity[flavor.pk]
    assert sum(value for (_, flavor_id), value in shares.items() if flavor_id == mig.pk) == unallocated[mig.pk]
    assert not any(flavor_id == h100.pk for _, flavor_id in shares)
    assert metering.recompute(start=week[0], end=week[1]) == []


def test_conservation_is_within_a_tenth_of_a_percent_when_a_lagging_sync_overfills_an_hour(db):
    small = FlavorFactory.create(name="L4", slug="l4", resource_name="nvidia.com/l4", capacity_units=2)
    team = TeamFactory.create(slug="vision", name="Vision")
    alice = UserFactory.create(username="alice")
    make_interval(make_workload(team=team, owner=alice, flavor=small, units=2), at("2026-10-06 00:00"),
                  at("2026-10-07 00:00"))
    # The next pod was recorded as starting 3 s before the first one's end was seen.
    make_interval(make_workload(team=team, owner=alice, flavor=small, units=2), at("2026-10-06 23:59:57"),
                  at("2026-10-07 00:00"))
    metering.rollups_refresh(until=at("2026-10-06 00:00"))
    metering.rollups_refresh(until=at("2026-10-07 00:00"))
    day = (at("2026-10-06 00:00"), at("2026-10-07 00:00"))

    capacity = ledger.capacity(start=day[0], end=day[1])[small.pk]
    used = total(flavor=small)
    unallocated = ledger.unallocated(start=day[0], end=day[1])[small.pk]

    assert used == capacity + 6 and unallocated == 0
    assert abs(used + unallocated - capacity) <= capacity / 1000


def test_finance_chooses_to_share_a_flavors_idle_capacity_and_the_ledger_follows(site, finance_user, lead):
    h100, vision, speech, _, robots = site
    with pytest.raises(PermissionDenied):
        services.idle_policy_set(actor=lead, flavor=h100, mode="share")
    with pytest.raises(DomainError, match="“everyone” is not an idle policy"):
        services.idle_policy_set(actor=finance_user, flavor=h100, mode="everyone")
    assert ledger.idle_shares(start=HOUR[0], end=HOUR[1]) == {}

    services.idle_policy_set(actor=finance_user, flavor=h100, mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE)

    assert sum(ledger.idle_shares(start=HOUR[0], end=HOUR[1]).values()) == 3 * 3600
    services.idle_policy_set(actor=finance_user, flavor=h100, mode=IdlePolicy.Mode.SHOW_APART)
    assert ledger.idle_shares(start=HOUR[0], end=HOUR[1]) == {}
    assert IdlePolicy.objects.count() == 1
