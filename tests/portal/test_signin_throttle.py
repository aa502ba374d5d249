"""Password sign-ins are throttled per account name and client address together, with waits that
double; failures from other addresses never lock the owner out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from portal.signin import backoff_seconds
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
RIGHT = "correct horse battery staple"
ATTACKER, OWNER = "198.51.100.7", "203.0.113.9"
WRONG = "That username and password do not match"


def sign_in(username: str, password: str, *, address: str = ATTACKER) -> tuple[int, str]:
    response = Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})
    return response.status_code, response.content.decode()


def waiting(seconds: str) -> str:
    return f"Too many failed sign-ins for this account from your network address; try again in {seconds}."


def test_the_waits_are_five_free_failures_then_30_seconds_doubling_up_to_15_minutes():
    waits = [backoff_seconds(failures=n, before_wait=5) for n in range(1, 13)]

    assert waits == [0, 0, 0, 0, 30, 60, 120, 240, 480, 900, 900, 900]
    assert [backoff_seconds(failures=n, before_wait=0) for n in (1, 2, 3)] == [30, 60, 120]


def test_repeated_failures_from_one_address_wait_longer_each_time_and_are_told_how_long(clock):
    UserFactory(username="alice")
    for _ in range(4):
        assert WRONG in sign_in("alice", "guess")[1]

    said = []
    for wait in (30, 60, 120, 240, 480, 900, 900):
        status, page = sign_in("alice", "guess")
        said.append(page)
        clock[0] += wait - 1
        assert sign_in("alice", RIGHT)[0] == 200, f"let in during a {wait} s wait"  # refused, and not counted
        clock[0] += 1

    assert [waiting(words) in page for page, words in zip(said, (
        "30 seconds", "1 minute", "2 minutes", "4 minutes", "8 minutes", "15 minutes", "15 minutes"), strict=True)] \
        == [True] * 7
    assert sign_in("alice", RIGHT)[0] == 302


def test_a_try_during_a_wait_says_how_long_is_left_even_with_the_right_password(clock):
    UserFactory(username="alice")
    for _ in range(5):
        sign_in("alice", "guess")
    clock[0] += 10

    status, page = sign_in("alice", RIGHT)

    assert status == 200 and waiting("20 seconds") in page


def test_an_attackers_failures_from_one_address_do_not_lock_the_owner_out_of_another(clock):
    UserFactory(username="root", is_superuser=True, is_staff=True)
    for _ in range(100):  # a try every 30 s for 50 minutes: each one the waits let through fails
        sign_in("root", "guess", address=ATTACKER)
        clock[0] += 30

    assert sign_in("root", RIGHT, address=OWNER)[0] == 302
    status, page = sign_in("root", RIGHT, address=ATTACKER)
    assert status == 200 and "Too many failed sign-ins" in page


def test_an_account_attacked_from_many_addresses_slows_them_but_lets_a_clean_address_in(clock, settings):
    settings.PORTAL_LOGIN_ACCOUNT_CEILING = 20
    UserFactory(username="root", is_superuser=True, is_staff=True)
    for number in range(21):  # one failure each, past the ceiling
        sign_in("root", "guess", address=f"192.0.2.{number}")

    fresh = sign_in("root", "guess", address="192.0.2.200")  # a new address now waits from its first failure
    owner = sign_in("root", RIGHT, address=OWNER)

    assert waiting("30 seconds") in fresh[1]
    assert owner[0] == 302


def test_the_owner_slowed_on_an_attacked_account_waits_seconds_and_then_gets_in(clock, settings):
    settings.PORTAL_LOGIN_ACCOUNT_CEILING = 20
    UserFactory(username="root", is_superuser=True, is_staff=True)
    for number in range(21):
        sign_in("root", "guess", address=f"192.0.2.{number}")

    typo = sign_in("root", "typo", address=OWNER)
    clock[0] += 30

    assert waiting("30 seconds") in typo[1]
    assert sign_in("root", RIGHT, address=OWNER)[0] == 302


def test_another_account_from_the_same_address_is_unaffected_by_a_wait(clock):
    UserFactory(username="alice")
    UserFactory(username="bob")
    for _ in range(5):
        sign_in("alice", "guess")

    assert sign_in("bob", RIGHT)[0] == 302
    assert waiting("30 seconds") in sign_in("alice", RIGHT)[1]


def test_an_address_that_fails_across_twenty_names_waits_for_any_name(clock):
    UserFactory(username="bob")
    for number in range(20):
        sign_in(f"nobody{number}", "guess")

    status, page = sign_in("bob", RIGHT)

    assert status == 200
    assert "Too many failed sign-ins for this network address; try again in 30 seconds." in page
    assert sign_in("bob", RIGHT, address=OWNER)[0] == 302


def test_the_wait_ends_after_its_time(clock):
    UserFactory(username="alice")
    for _ in range(5):
        sign_in("alice", "guess")

    clock[0] += 30

    assert sign_in("alice", RIGHT)[0] == 302


def test_a_right_password_ends_the_pairs_run_of_failures(clock):
    UserFactory(username="alice")
    for _ in range(4):
        sign_in("alice", "guess")
    assert sign_in("alice", RIGHT)[0] == 302

    for _ in range(4):
        assert WRONG in sign_in("alice", "guess")[1]
    assert sign_in("alice", RIGHT)[0] == 302


def test_failures_are_counted_again_from_the_next_hour(clock):
    UserFactory(username="alice")
    for _ in range(4):
        sign_in("alice", "guess")

    clock[0] += 3600
    for _ in range(4):
        assert WRONG in sign_in("alice", "guess")[1]


def test_a_name_that_is_no_account_waits_the_same_way_so_the_wait_reveals_nothing(clock):
    for _ in range(5):
        sign_in("nobody", "guess")

    assert waiting("30 seconds") in sign_in("nobody", "guess")[1]


def test_the_admin_login_refuses_a_waiting_pair_too_and_counts_no_failure_for_it(clock):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    for _ in range(5):
        sign_in("root", "guess")
    admin = Client(REMOTE_ADDR=ATTACKER)

    during = admin.post("/admin/login/", {"username": "root", "password": RIGHT})
    clock[0] += 30
    after = admin.post("/admin/login/", {"username": "root", "password": RIGHT})

    assert during.status_code == 200 and "_auth_user_id" not in during.wsgi_request.session
    assert after.status_code == 302  # the refused try did not lengthen the wait


def test_behind_a_proxy_the_client_is_the_address_the_proxy_saw(clock, settings):
    settings.PORTAL_PROXY_HOPS = 1
    UserFactory(username="bob")
    for _ in range(5):
        Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7").post(
            "/login/", {"username": "bob", "password": "guess"})

    from_elsewhere = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.8").post(
        "/login/", {"username": "bob", "password": RIGHT})
    spoofing = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="9.9.9.9, 198.51.100.7").post(
        "/login/", {"username": "bob", "password": RIGHT})

    assert from_elsewhere.status_code == 302
    assert spoofing.status_code == 200


def test_the_lockout_backend_refuses_a_waiting_pair_when_asked_asynchronously_too(clock):
    from asgiref.sync import async_to_sync
    from django.core.exceptions import PermissionDenied
    from django.test import RequestFactory

    from portal.signin import SignInLockout

    for _ in range(5):
        sign_in("alice", "guess")

    with pytest.raises(PermissionDenied):
        async_to_sync(SignInLockout().aauthenticate)(RequestFactory().post("/login/", REMOTE_ADDR=ATTACKER),
                                                     username="alice", password=RIGHT)


@pytest.mark.parametrize(("gone", "instead"), [("PORTAL_LOGIN_FAILURE_LIMIT", "PORTAL_LOGIN_FAILURES_BEFORE_WAIT"),
                                               ("PORTAL_LOGIN_LOCKOUT_SECONDS", "PORTAL_LOGIN_BACKOFF_MAX_SECONDS")])
def test_a_site_still_setting_the_per_account_lockout_is_stopped_at_start_with_what_to_set(tmp_path, gone, instead):
    env = {**os.environ, "PORTAL_VAR_DIR": str(tmp_path), gone: "10"}

    done = subprocess.run([sys.executable, "-c", "import portal.settings"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)

    assert done.returncode != 0
    assert f"{gone} is no longer read" in done.stderr and f"Set {instead}" in done.stderr
