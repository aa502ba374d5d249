"""A flavor's unit is a fraction of one GPU (issue 22, §6): a denominator of 0 made the catalog
form, the Django admin and the catalog page a 500 (ZeroDivisionError in the model's own check).
Now the model refuses it in words before it makes the fraction, the page form and the admin show
that, and the database refuses any row that is no fraction of one GPU, whoever writes it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from portal.models import AuditEvent
from tenants.models import Flavor
from tests.conftest import login
from tests.helpers import api
from tests.tenants.test_platform_pages import flavor_form

pytestmark = pytest.mark.django_db


def admin_flavor_form(**changes: Any) -> dict[str, Any]:
    return {**flavor_form(**changes), "node_labels": "{}"}


@pytest.mark.parametrize(("numerator", "denominator", "words"), [
    ("1", "0", "Ensure this value is greater than or equal to 1."),
    ("0", "1", "The numerator is a whole number of at least 1."),  # 0 is a CPU-only flavor's alone
    ("2", "1", "One unit cannot be more than one physical GPU."),
    ("1", "１", "Enter a whole number. Write it in the digits 0 to 9."),
    ("1", "9" * 40, "Enter a whole number. Write it in the digits 0 to 9."),
])
def test_the_catalog_form_refuses_a_unit_that_is_no_fraction_of_a_gpu_in_words(admin_user, numerator, denominator, words):
    response = login(admin_user).post(reverse("tenants:flavor-create"),
                                      flavor_form(fraction_numerator=numerator, fraction_denominator=denominator))

    assert response.status_code == 400
    assert words in response.content.decode()
    assert not Flavor.objects.filter(slug="l4").exists()


@pytest.mark.parametrize(("numerator", "denominator", "words"), [
    ("1", "0", "Ensure this value is greater than or equal to 1."),
    ("3", "2", "One unit cannot be more than one physical GPU."),
])
def test_the_django_admin_refuses_a_unit_that_is_no_fraction_of_a_gpu_in_words(admin_user, numerator, denominator, words):
    response = login(admin_user).post(reverse("admin:tenants_flavor_add"),
                                      admin_flavor_form(fraction_numerator=numerator, fraction_denominator=denominator))

    assert response.status_code == 200  # the form again, with its error
    assert words in response.content.decode()
    assert not Flavor.objects.filter(slug="l4").exists()
    assert not AuditEvent.objects.filter(action__startswith="flavor.").exists()


@pytest.mark.parametrize("denominator", [0, "１", 10**40])
def test_the_api_refuses_a_denominator_that_is_no_whole_number_of_at_least_one(admin_user, denominator):
    body = {"name": "L4", "slug": "l4", "resource_name": "nvidia.com/gpu", "gpu_model": "NVIDIA L4",
            "fraction_denominator": denominator, "capacity_units": 8}

    response = api(admin_user).post("/api/flavors/", body, format="json")

    assert response.status_code == 400
    assert "fraction_denominator" in response.json()["errors"]
    assert not Flavor.objects.filter(slug="l4").exists()


def test_the_model_says_what_is_wrong_with_a_denominator_of_zero_rather_than_dividing_by_it(flavor):
    flavor.fraction_denominator = 0
    with pytest.raises(Exception) as refused:
        flavor.clean()
    assert "The denominator is a whole number of at least 1" in str(refused.value)


@pytest.mark.parametrize("fraction", [{"fraction_denominator": 0}, {"fraction_numerator": 0},
                                      {"fraction_numerator": 2, "fraction_denominator": 1},
                                      {"fraction_denominator": 257}])
def test_the_database_refuses_a_flavor_that_is_no_fraction_of_one_gpu_whoever_writes_it(flavor, fraction):
    with pytest.raises(IntegrityError, match="flavor_fraction_of_one_gpu"), transaction.atomic():
        Flavor.objects.filter(pk=flavor.pk).update(**fraction)

    flavor.refresh_from_db()
    assert (flavor.fraction_numerator, flavor.fraction_denominator) == (1, 1)

