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
    assert selectors.hourly_cost(flavor=mig_flavor, units=3) == (Decimal("3.00"), "USD")


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
