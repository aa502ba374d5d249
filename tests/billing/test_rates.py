"""The rate card: prices per GPU-hour from a moment on, and the launch form's estimate from it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from billing.rates import selectors, services
from billing.rates.card import RateCard
from portal.errors import DomainError
from portal.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_the_rate_in_force_is_the_latest_that_has_started(finance_user, flavor):
    first = services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="2.50")
    later = services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="3.00",
                              effective_from=timezone.now() + dt.timedelta(days=10))
    card = RateCard.read()
    assert card.rate_at(flavor.pk, timezone.now()) == first
    assert card.rate_at(flavor.pk, timezone.now() + dt.timedelta(days=11)) == later
    assert card.rate_at(flavor.pk, timezone.now() - dt.timedelta(days=1)) is None
    event = AuditEvent.objects.filter(action="rate.set").first()
    assert event is not None and event.message.startswith("fiona set H100 80GB to 3.00 USD per GPU-hour")


def test_a_slice_or_share_costs_its_fraction_of_a_gpu(finance_user, mig_flavor):
    services.rate_set(actor=finance_user, flavor=mig_flavor, price_per_gpu_hour="7.00")
    found = selectors.hourly_cost(flavor=mig_flavor, units=3)
    assert found is not None and (found.amount, found.currency) == (Decimal("3.00"), "USD")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"price_per_gpu_hour": "cheap"}, "not a price"),
    ({"price_per_gpu_hour": "-1"}, "zero or more"),
    ({"price_per_gpu_hour": "1", "effective_from": timezone.now() - dt.timedelta(days=1)}, "cannot start in the past"),
    ({"price_per_gpu_hour": "1", "currency": "dollars"}, "three-letter code"),
])
def test_bad_rates_are_refused_with_the_reason(finance_user, flavor, kwargs, message):
    with pytest.raises(DomainError, match=message):
        services.rate_set(actor=finance_user, flavor=flavor, **kwargs)


def test_only_finance_and_platform_admins_set_rates(lead, admin_user, flavor):
    with pytest.raises(PermissionDenied):
        services.rate_set(actor=lead, flavor=flavor, price_per_gpu_hour="1")
    services.rate_set(actor=admin_user, flavor=flavor, price_per_gpu_hour="1")


def test_the_launch_hint_estimates_the_hourly_cost_at_the_current_rate(ready_team, member, training, flavor, finance_user,
                                                                        as_user):
    services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="2.75")
    fragment = as_user(member).get(reverse("jobs:launch-hint"), {
        "team": "vision", "template": "pytorch-train", "flavor": flavor.slug, "units": "2", "cpu": "4", "memory_gib": "16",
        "priority": "normal", "p_epochs": "10", "p_learning_rate": "0.001", "p_image_tag": "2.5",
    }).content.decode()
    assert "About 5.50 USD per hour at the current rate" in fragment


# --- Price for risk: a discount for borrowed (preemptible) hours, dated with its price --------


def test_a_rate_takes_a_discount_for_borrowed_hours_dated_with_its_price_and_audited(finance_user, flavor):
    now = services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="3.00", borrowed_discount_percent="30")
    later = services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="3.00",
                              effective_from=timezone.now() + dt.timedelta(days=10))
    assert now.borrowed_discount_percent == Decimal("30.00") and later.borrowed_discount_percent == 0
    card = RateCard.read()
    hourly = card.hourly_cost(flavor, 2, timezone.now())
    assert hourly is not None
    assert (hourly.amount, hourly.borrowed_amount, hourly.borrowed_discount) == (Decimal("6.00"), Decimal("4.20"), "30 % off")
    after = card.hourly_cost(flavor, 2, timezone.now() + dt.timedelta(days=11))
    assert after is not None and after.borrowed_amount == after.amount == Decimal("6.00")  # the discount ends with its price
    event = AuditEvent.objects.filter(action="rate.set").order_by("pk").first()
    assert event is not None and "borrowed hours 30 % off" in event.message


@pytest.mark.parametrize(("discount", "message"), [
    ("-5", "from 0 to 100"),
    ("101", "at most 100"),
    ("12.345", "at most 2 decimals"),
    ("a third", "is not a discount"),
])
def test_a_bad_discount_is_refused_in_words_and_no_rate_is_stored(finance_user, flavor, discount, message):
    from billing.models import Rate

    with pytest.raises(DomainError, match=message) as refused:
        services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="3.00", borrowed_discount_percent=discount)
    assert refused.value.field == "borrowed_discount_percent"
    assert not Rate.objects.filter(flavor=flavor).exists()


def test_a_cpu_only_flavor_has_no_discount_for_borrowed_hours(finance_user):
    from tests.jobs.test_cpu_flavor import cpu_flavor

    cpu = cpu_flavor()
    cpu.save()
    with pytest.raises(DomainError, match="never borrowed") as refused:
        services.rate_set(actor=finance_user, flavor=cpu, price_per_gpu_hour="0.20", borrowed_discount_percent="10")
    assert refused.value.field == "borrowed_discount_percent"


def test_the_rate_card_page_and_api_set_and_show_the_discount(finance_user, flavor, as_user):
    client = as_user(finance_user)
    refused = client.post(reverse("billing:rate-card"), {"flavor": flavor.slug, "price_per_gpu_hour": "3.00",
                                                        "currency": "USD", "borrowed_discount_percent": "150"})
    assert refused.status_code == 400 and "at most 100" in refused.content.decode()
    response = client.post(reverse("billing:rate-card"), {"flavor": flavor.slug, "price_per_gpu_hour": "3.00",
                                                         "currency": "USD", "borrowed_discount_percent": "25"}, follow=True)
    page = response.content.decode()
    assert "borrowed hours 25 % off" in page  # the message
    assert 'data-testid="rate-borrowed-discount">25 % off<' in page
    body = client.post("/api/billing/rates/", {"flavor": flavor.slug, "price_per_gpu_hour": "3.10",
                                               "borrowed_discount_percent": "12.5",
                                               "effective_from": (timezone.now() + dt.timedelta(days=1)).isoformat()},
                       content_type="application/json").json()
    assert body["borrowed_discount_percent"] == "12.50"
    bad = client.post("/api/billing/rates/", {"flavor": flavor.slug, "price_per_gpu_hour": "3.10",
                                              "borrowed_discount_percent": "-1"}, content_type="application/json")
    assert bad.status_code == 400 and "from 0 to 100" in bad.json()["message"]


def test_the_launch_hint_gives_the_borrowed_price_and_says_when_the_launch_would_borrow(
        ready_team, other_team, member, training, flavor, finance_user, as_user):
    from tests.helpers import make_ready

    services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="2.00", borrowed_discount_percent="40")
    make_ready(other_team, flavor, 4)  # a team with idle quota to lend
    query = {"team": "vision", "template": "pytorch-train", "flavor": flavor.slug, "cpu": "4", "memory_gib": "16",
             "priority": "normal", "p_epochs": "10", "p_learning_rate": "0.001", "p_image_tag": "2.5"}
    own = as_user(member).get(reverse("jobs:launch-hint"), {**query, "units": "2"}).content.decode()
    assert "About 4.00 USD per hour at the current rate" in own
    assert "borrowed (preemptible) hours cost 40 % off: about 2.40 USD per hour" in own
    borrowing = as_user(member).get(reverse("jobs:launch-hint"), {**query, "units": "6"}).content.decode()
    assert "Would borrow" in borrowing
    assert "it would borrow, and borrowed hours may be preempted, so they cost 40 % off: about 7.20 USD per hour" in borrowing
