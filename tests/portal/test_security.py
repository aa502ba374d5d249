"""What a browser is told to refuse, and how long a signed-in session lives without use."""

from __future__ import annotations

import datetime as dt
from unittest import mock

from django.conf import settings as django_settings
from django.utils import timezone


def _at(moment: dt.datetime) -> mock._patch:
    """Every reader of the clock (the session store included) sees `moment`."""
    return mock.patch.object(timezone, "now", return_value=moment)


def test_sessions_time_out_after_eight_idle_hours_by_default():
    assert django_settings.SESSION_IDLE_SECONDS == 8 * 60 * 60
    assert django_settings.SESSION_COOKIE_AGE == django_settings.SESSION_IDLE_SECONDS
    assert django_settings.SESSION_SAVE_EVERY_REQUEST


def test_an_idle_session_expires_and_the_next_page_asks_for_a_login(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
        assert client.get("/").status_code == 200
    idle = dt.timedelta(seconds=django_settings.SESSION_IDLE_SECONDS)
    with _at(start + idle + dt.timedelta(minutes=1)):
        response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith(django_settings.LOGIN_URL)


def test_each_request_moves_the_end_of_a_session_so_one_in_use_stays_signed_in(client, member):
    start = timezone.now()
    idle = dt.timedelta(seconds=django_settings.SESSION_IDLE_SECONDS)
    with _at(start):
        client.force_login(member)
    for step in range(1, 4):
        with _at(start + step * (idle - dt.timedelta(minutes=5))):
            assert client.get("/").status_code == 200, f"signed out at step {step}"
