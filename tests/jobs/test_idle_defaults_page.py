"""The platform's idle policy in the portal: only platform admins open or save it (an admin who
signs in through single sign-on is not staff and needs no Django admin), a value outside its
bounds is refused in words and changes nothing, and every save is audited through
reclaim.idle_defaults_set."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs.models import IdleDefaults
from portal.models import AuditEvent
from tests.conftest import login
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = "/platform/idle-policy/"


def idle_form(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "threshold_percent": "3", "window_minutes": "45", "action": "stop", "grace_minutes": "20",
        "min_threshold_percent": "1", "max_threshold_percent": "10", "min_window_minutes": "15",
        "max_window_minutes": "600", "min_grace_minutes": "5", "max_grace_minutes": "120",
        "allowed_actions": ["notify", "stop"],
    }
    data.update(changes)
    return data


@pytest.fixture
def sso_admin(db):
    """A platform admin as single sign-on makes one: never staff."""
    return UserFactory(username="ada", is_platform_admin=True, is_staff=False)


def test_the_page_has_its_address(sso_admin):
    assert reverse("jobs:idle-defaults") == URL


@pytest.mark.parametrize("who", ["lead", "member", "finance_user", "outsider"])
def test_only_platform_admins_open_or_save_the_idle_policy(request, who):
    client = login(request.getfixturevalue(who))
    assert client.get(URL).status_code == 403
    assert client.post(URL, idle_form()).status_code == 403
    assert not IdleDefaults.objects.exists() and not AuditEvent.objects.filter(action="idle_defaults.set").exists()
    assert URL not in client.get(reverse("tenants:dashboard")).content.decode()


def test_an_sso_admin_sees_the_current_policy_and_the_nav_link(sso_admin):
    page = login(sso_admin).get(URL).content.decode()
    assert "idle when its GPUs are under 5 % engine active for 30 minutes: the owner is warned" in page
    assert f'<a href="{URL}">Idle policy</a>' in page
    assert 'name="threshold_percent" value="5"' in page and 'name="max_window_minutes" value="1440"' in page


def test_an_sso_admin_saves_the_policy_and_it_is_audited(sso_admin):
    client = login(sso_admin)
    response = client.post(URL, idle_form())
    assert response.status_code == 302 and response["Location"] == URL
    saved = IdleDefaults.current()
    assert (saved.threshold_percent, saved.window_minutes, saved.action, saved.grace_minutes) == (3, 45, "stop", 20)
    assert (saved.min_window_minutes, saved.max_window_minutes, saved.allowed_actions) == (15, 600, ["notify", "stop"])
    assert saved.updated_by == sso_admin
    event = AuditEvent.objects.get(action="idle_defaults.set")
    assert event.actor == sso_admin and "idle when its GPUs are under 3 % engine active for 45 minutes" in event.message
    page = client.get(URL).content.decode()
    assert "Saved the platform&#x27;s idle policy: idle when its GPUs are under 3 %" in page
    assert "Last set by ada" in page


def test_saving_through_htmx_redirects_with_hx_redirect(sso_admin):
    response = login(sso_admin).post(URL, idle_form(), headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Redirect"] == URL and response.content == b""


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"threshold_percent": "30"}, "threshold_percent", "The default idle threshold must lie between 1 and 10."),
    ({"min_window_minutes": "700"}, "min_window_minutes", "The lowest idle window cannot exceed the highest."),
    ({"action": "scale_to_min"}, "action", "The default idle action must be one of the allowed ones."),
    ({"max_threshold_percent": "101"}, "max_threshold_percent", "Ensure this value is less than or equal to 100."),
    ({"window_minutes": "0"}, "window_minutes", "Ensure this value is greater than or equal to 1."),
    ({"grace_minutes": "-5"}, "grace_minutes", "Ensure this value is greater than or equal to 0."),
    ({"grace_minutes": "9" * 12}, "grace_minutes", "Ensure this value is less than or equal to 2147483647."),
    ({"window_minutes": "soon"}, "window_minutes", "Enter a whole number."),
    ({"action": "delete"}, "action", "Select a valid choice. delete is not one of the available choices."),
    ({"allowed_actions": ["notify", "reboot"]}, "allowed_actions", "Select a valid choice. reboot is not one of"),
], ids=["default-outside-bounds", "bounds-reversed", "action-not-allowed", "percent-over-100", "zero-window",
        "negative-grace", "overflow", "not-a-number", "unknown-action", "unknown-allowed-action"])
def test_bad_values_are_refused_in_words_and_change_nothing(sso_admin, changes, field, message):
    client = login(sso_admin)
    assert client.post(URL, idle_form()).status_code == 302
    before = IdleDefaults.current()
    response = client.post(URL, idle_form(**changes))
    assert response.status_code == 400
    body = response.content.decode()
    assert f'data-testid="error-{field}">' in body and message.replace("'", "&#x27;") in body, body
    after = IdleDefaults.objects.get()
    assert [getattr(after, name) for name in ("threshold_percent", "window_minutes", "action", "grace_minutes",
                                              "min_window_minutes", "allowed_actions", "updated_at")] == [
        getattr(before, name) for name in ("threshold_percent", "window_minutes", "action", "grace_minutes",
                                           "min_window_minutes", "allowed_actions", "updated_at")]
    assert AuditEvent.objects.filter(action="idle_defaults.set").count() == 1
