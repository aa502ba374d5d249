"""Password sign-ins are throttled per account name and per client address."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

RIGHT = "correct horse battery staple"
LOCKED_ACCOUNT = "Too many failed sign-ins for this account; try again in 15 minutes."


def sign_in(username: str, password: str, *, address: str = "198.51.100.7") -> tuple[int, str]:
    response = Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})
    return response.status_code, response.content.decode()


def test_ten_wrong_passwords_lock_the_account_even_against_the_right_one(clock):
    UserFactory(username="alice")
    for _ in range(9):
        assert "That username and password do not match" in sign_in("alice", "guess")[1]

    tenth = sign_in("alice", "guess")
    clock[0] += 60
    right = sign_in("alice", RIGHT, address="203.0.113.9")

    assert LOCKED_ACCOUNT in tenth[1]
    assert right[0] == 200
    assert "Too many failed sign-ins for this account; try again in 14 minutes." in right[1]


def test_another_account_from_another_address_is_unaffected_by_a_lockout(clock):
    UserFactory(username="alice")
    UserFactory(username="bob")
    for _ in range(10):
        sign_in("alice", "guess")

    assert sign_in("bob", RIGHT, address="203.0.113.9")[0] == 302
    assert LOCKED_ACCOUNT in sign_in("alice", RIGHT, address="203.0.113.9")[1]  # while alice is locked


def test_the_address_is_locked_after_ten_failures_across_names(clock):
    UserFactory(username="bob")
    for number in range(10):
        sign_in(f"nobody{number}", "guess")

    status, page = sign_in("bob", RIGHT)

    assert status == 200
    assert "Too many failed sign-ins for this network address; try again in 15 minutes." in page
    assert sign_in("bob", RIGHT, address="203.0.113.9")[0] == 302


def test_the_lockout_ends_after_its_time(clock):
    UserFactory(username="alice")
    for _ in range(10):
        sign_in("alice", "guess")

    clock[0] += 15 * 60

    assert sign_in("alice", RIGHT)[0] == 302


def test_a_right_password_ends_the_accounts_run_of_failures(clock):
    UserFactory(username="alice")
    for _ in range(9):
        sign_in("alice", "guess", address="203.0.113.9")
    assert sign_in("alice", RIGHT, address="192.0.2.1")[0] == 302

    assert "do not match" in sign_in("alice", "guess", address="192.0.2.1")[1]
    assert sign_in("alice", RIGHT, address="192.0.2.1")[0] == 302


def test_a_name_that_is_no_account_locks_the_same_way_so_the_lockout_reveals_nothing(clock):
    for _ in range(10):
        sign_in("nobody", "guess")

    assert LOCKED_ACCOUNT in sign_in("nobody", "guess", address="203.0.113.9")[1]


def test_the_admin_login_refuses_a_locked_account_too(clock):
    UserFactory(username="root", is_staff=True, is_superuser=True)
    for _ in range(10):
        sign_in("root", "guess")

    response = Client(REMOTE_ADDR="203.0.113.9").post("/admin/login/", {"username": "root", "password": RIGHT})

    assert response.status_code == 200
    assert "_auth_user_id" not in response.wsgi_request.session


def test_behind_a_proxy_the_client_is_the_address_the_proxy_saw(clock, settings):
    settings.PORTAL_PROXY_HOPS = 1
    UserFactory(username="bob")
    for number in range(10):
        Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7").post(
            "/login/", {"username": f"nobody{number}", "password": "guess"})

    from_elsewhere = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.8").post(
        "/login/", {"username": "bob", "password": RIGHT})
    spoofing = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="9.9.9.9, 198.51.100.7").post(
        "/login/", {"username": "bob", "password": RIGHT})

    assert from_elsewhere.status_code == 302
    assert spoofing.status_code == 200


def test_the_lockout_backend_refuses_a_locked_account_when_asked_asynchronously_too(clock):
    from asgiref.sync import async_to_sync
    from django.core.exceptions import PermissionDenied

    from portal.signin import SignInLockout

    for _ in range(10):
        sign_in("alice", "guess")

    with pytest.raises(PermissionDenied):
        async_to_sync(SignInLockout().aauthenticate)(None, username="alice", password=RIGHT)
