"""Shared fixtures: a small site with two teams, a lead and a member in each, and outsiders."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery._state import _set_task_join_will_block
from django.db import connections
from django.test import Client

from jobs import services as job_services
from jobs.models import WorkloadKind
from portal import limits
from portal.kube import reset_gateway
from portal.kube.simulated import SimulatedGateway
from portal.metrics import reset_metrics
from portal.metrics.simulated import SimulatedMetrics
from tenants.models import Membership
from tests.factories import (
    FlavorFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
)
from tests.helpers import TRAINING_PARAMS, make_ready


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs the suite on pytest-xdist workers (`--dist loadgroup`): the tests on the
    real control plane (`cluster`) all go to one of them, so one control plane (a session fixture)
    serves them in turn rather than one per worker on two cores. The rest is spread; the tests
    on the services share them safely (a database per worker, a queue or a Redis of their own).
    First among the hooks, so the group is there before xdist's own hook reads it."""
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("control-plane"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On an xdist worker under `--dist loadgroup`, xdist writes each test's group into its node
    id (`…@control-plane`), which is all its scheduler reads. If it has not (a pytest that ignores
    it: pytest-xdist#1386), each worker starts a control plane of its own, two on two cores, and
    the tests fail in ways that look like races: fail each of them with the cause instead."""
    grouped = "@" in item.nodeid.rpartition("]")[2]
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") and not grouped:
        pytest.fail("pytest-xdist did not keep this test in its group, so it may run beside another that shares "
                    "the control plane: this pytest and pytest-xdist do not work together for "
                    "--dist loadgroup; see the pin in pyproject.toml", pytrace=False)


@pytest.fixture(autouse=True)
def _eager_celery(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    # Celery marks "inside a task" in one process-wide flag around each eager call, saving and
    # restoring it unlocked: two threads sending eager tasks at once (the concurrency tests) can
    # leave it set, and every later `.get()` in that process then refuses. Each test starts clear.
    _set_task_join_will_block(False)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # PBKDF2's deliberate slowness would make the suite ten times longer; hashing is not under test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _own_cache(settings):
    # Rate and sign-in counters live in the cache: each test gets an empty one of its own, and
    # never the services' Redis, whose clear() would flush the broker's queues too.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"test-{uuid.uuid4()}"}}


@pytest.fixture(autouse=True)
def _allowed_registries(settings):
    # The registries the suite's templates pull from (x/y:1 is Docker Hub's); the allow-list's own
    # tests (tests/jobs/test_template_policy.py) set their own.
    settings.PORTAL_IMAGE_REGISTRIES = ["docker.io", "quay.io", "registry.example.com"]


@pytest.fixture
def clock(monkeypatch):
    """The rate counters' clock (portal.limits), moved by hand; it starts on the hour."""
    now = [1_800_000_000.0]
    monkeypatch.setattr(limits, "clock", lambda: now[0])
    return now


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


# --- Workloads on the simulated cluster -------------------------------------------------------


@pytest.fixture
def simulated():
    cluster = SimulatedGateway()
    reset_gateway(cluster)
    yield cluster
    reset_gateway(None)


@pytest.fixture
def gpu_metrics(simulated):
    """The simulated metrics door over the simulated cluster's pods; tests set pods' engine
    active, XIDs and outages on it."""
    door = SimulatedMetrics()
    reset_metrics(door)
    yield door
    reset_metrics(None)


@pytest.fixture
def ready_team(team, flavor, simulated):
    return make_ready(team, flavor)


@pytest.fixture
def training(admin_user, flavor):
    return job_services.template_create(
        user=admin_user, slug="pytorch-train", name="PyTorch training", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="pytorch/pytorch:2.5", command=["python", "train.py"],
        args=["--epochs", "{epochs}", "--lr", "{learning_rate}"], env={"TAG": "{image_tag}"},
        default_units=1, max_units=8, parameters=TRAINING_PARAMS,
    )


# --- A real browser ----------------------------------------------------------------------------


@pytest.fixture
def browser() -> Iterator[Any]:
    from tests.browsing import CHROMIUM, CHROMIUM_ARGS, sync_api

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's Chromium is not installed: `make test` installs it (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
            # Inside Playwright's sync API the test runs in another contextvars context, so
            # Django's connections (asgiref Locals) there are new ones, which the test database's
            # own teardown (in the outer context) never closes: each browser test left one open,
            # and dropping the test database warned that "other users" were still on it.
            connections.close_all()
