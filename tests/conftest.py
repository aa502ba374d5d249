"""Shared fixtures: a small site with two teams, a lead and a member in each, and outsiders."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import Membership
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory


@pytest.fixture(autouse=True)
def _eager_celery(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # PBKDF2's deliberate slowness would make the suite ten times longer; hashing is not under test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def flavor(db):
    return FlavorFactory(name="H100 80GB", slug="h100-80gb", resource_name="nvidia.com/gpu", capacity_units=16)


@pytest.fixture
def mig_flavor(db):
    return FlavorFactory(
        name="A100 1g.10gb", slug="a100-1g10gb", resource_name="nvidia.com/mig-1g.10gb",
        sharing_mode="mig", gpu_model="NVIDIA A100 80GB", fraction_denominator=7, capacity_units=56,
    )


@pytest.fixture
def team(db):
    return TeamFactory(slug="vision", name="Vision")


@pytest.fixture
def other_team(db):
    return TeamFactory(slug="speech", name="Speech")


@pytest.fixture
def lead(team):
    user = UserFactory(username="lena")
    MembershipFactory(team=team, user=user, role=Membership.Role.LEAD)
    return user


@pytest.fixture
def member(team):
    user = UserFactory(username="alice")
    MembershipFactory(team=team, user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def outsider(other_team):
    """A member and lead of another team: every object of `team` must be 404 to them."""
    user = UserFactory(username="oscar")
    MembershipFactory(team=other_team, user=user, role=Membership.Role.LEAD)
    return user


@pytest.fixture
def admin_user(db):
    return UserFactory(username="root", is_platform_admin=True, is_staff=True)


@pytest.fixture
def finance_user(db):
    return UserFactory(username="fiona", is_finance=True)


def login(user, *, enforce_csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


@pytest.fixture
def as_user():
    return login
