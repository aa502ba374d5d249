"""Finance chooses per flavor what happens to unallocated capacity, from the rate card: a small
htmx form per flavor over `billing.rates.services.idle_policy_set`, which decides who may and audits."""

from __future__ import annotations

import pytest
from django.urls import reverse

from billing.models import IdlePolicy
from portal.models import AuditEvent
from tests.conftest import login

pytestmark = pytest.mark.django_db

SHARE, APART = IdlePolicy.Mode.SHARE_BY_GUARANTEE, IdlePolicy.Mode.SHOW_APART


def set_url(flavor) -> str:
    return reverse("billing:idle-policy-set", args=[flavor.slug])


def row_of(html: str, flavor) -> str:
    return html.split(f'data-testid="idle-policy-{flavor.slug}"')[1].split("</tr>")[0]


def test_the_rate_card_shows_every_flavor_apart_until_finance_chooses(as_user, finance_user, flavor, mig_flavor):
    html = as_user(finance_user).get(reverse("billing:rate-card")).content.decode()
    for each in (flavor, mig_flavor):
        row = row_of(html, each)
        assert f'hx-post="{set_url(each)}"' in row and f'action="{set_url(each)}"' in row
        assert '<option value="apart" selected>Show apart as unallocated</option>' in row
        assert '<option value="share">Share among teams by guaranteed quota</option>' in row


def test_finance_shares_a_flavors_idle_capacity_with_htmx_and_the_change_is_audited(as_user, finance_user, flavor,
                                                                                    mig_flavor):
    client = as_user(finance_user)
    response = client.post(set_url(flavor), {"mode": "share"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    fragment = response.content.decode()
    assert fragment.lstrip().startswith(f'<tr id="idle-policy-{flavor.slug}"')  # just the row, swapped in place
    assert "Saved: share among teams by guaranteed quota." in fragment
    assert '<option value="share" selected>' in fragment
    assert IdlePolicy.objects.get(flavor=flavor).mode == SHARE
    assert not IdlePolicy.objects.filter(flavor=mig_flavor).exists()
    [event] = AuditEvent.objects.filter(action="idle_policy.set")
    assert event.actor == finance_user
    assert event.message == f"fiona set {flavor.name}'s unallocated capacity to: Share among teams by guaranteed quota"

    html = client.get(reverse("billing:rate-card")).content.decode()
    assert '<option value="share" selected>' in row_of(html, flavor)
    assert '<option value="apart" selected>' in row_of(html, mig_flavor)

    client.post(set_url(flavor), {"mode": "share"}, HTTP_HX_REQUEST="true")  # the same choice again changes nothing
    assert AuditEvent.objects.filter(action="idle_policy.set").count() == 1
    client.post(set_url(flavor), {"mode": "apart"}, HTTP_HX_REQUEST="true")
    assert IdlePolicy.objects.get(flavor=flavor).mode == APART
    assert AuditEvent.objects.filter(action="idle_policy.set").count() == 2


def test_a_platform_admin_may_choose_too_and_without_javascript_is_sent_back_to_the_rate_card(as_user, admin_user,
                                                                                             flavor):
    response = as_user(admin_user).post(set_url(flavor), {"mode": "share"})
    assert response.status_code == 302 and response["Location"] == reverse("billing:rate-card")
    assert IdlePolicy.objects.get(flavor=flavor).mode == SHARE


@pytest.mark.parametrize("role", ["member", "lead", "outsider"])
def test_team_members_and_leads_are_refused_in_words_and_nothing_changes(request, as_user, role, flavor):
    IdlePolicy.objects.create(flavor=flavor, mode=APART)
    response = as_user(request.getfixturevalue(role)).post(set_url(flavor), {"mode": "share"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 403
    assert response.content.decode() == ("Only finance and platform admins choose what happens to a flavor's "
                                         "unallocated capacity.")
    assert IdlePolicy.objects.get(flavor=flavor).mode == APART
    assert not AuditEvent.objects.filter(action="idle_policy.set").exists()


def test_team_members_see_no_idle_policy_form_anywhere(as_user, member, lead, flavor):
    for user in (member, lead):
        assert as_user(user).get(reverse("billing:rate-card")).status_code == 403


def test_an_anonymous_visitor_is_sent_to_sign_in_and_a_get_is_not_a_change(client, as_user, finance_user, flavor):
    response = client.post(set_url(flavor), {"mode": "share"})
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert as_user(finance_user).get(set_url(flavor), {"mode": "share"}).status_code == 405
    assert not IdlePolicy.objects.exists()


def test_a_post_without_the_csrf_token_changes_nothing(finance_user, flavor):
    response = login(finance_user, enforce_csrf=True).post(set_url(flavor), {"mode": "share"})
    assert response.status_code == 403
    assert not IdlePolicy.objects.exists()


def test_an_unknown_flavor_is_404(as_user, finance_user):
    assert as_user(finance_user).post(reverse("billing:idle-policy-set", args=["no-such-gpu"]),
                                      {"mode": "share"}).status_code == 404


@pytest.mark.parametrize("mode", ["everyone", ""])
def test_an_unknown_policy_is_refused_in_words_in_the_row_and_on_the_page(as_user, finance_user, flavor, mig_flavor,
                                                                          mode):
    client = as_user(finance_user)
    sentence = "is not an idle policy; choose “apart” (show apart as unallocated) or “share”"
    fragment = client.post(set_url(flavor), {"mode": mode}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200  # htmx swaps only successful answers: the row carries the refusal
    assert sentence in fragment.content.decode() and "Saved" not in fragment.content.decode()
    page = client.post(set_url(flavor), {"mode": mode})
    assert page.status_code == 400
    html = page.content.decode()
    assert sentence in row_of(html, flavor) and sentence not in row_of(html, mig_flavor)
    assert not IdlePolicy.objects.exists() and not AuditEvent.objects.filter(action="idle_policy.set").exists()


IDLE_API = "/api/billing/idle-policies/"


def test_finance_reads_and_sets_idle_policies_through_the_api(as_user, finance_user, flavor, mig_flavor):
    client = as_user(finance_user)
    assert client.get(IDLE_API).json() == [  # by name: A100 1g.10gb, then H100 80GB
        {"flavor": mig_flavor.slug, "mode": "apart", "mode_label": "Show apart as unallocated"},
        {"flavor": flavor.slug, "mode": "apart", "mode_label": "Show apart as unallocated"},
    ]
    response = client.post(IDLE_API, {"flavor": flavor.slug, "mode": "share"}, content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"flavor": flavor.slug, "mode": "share", "mode_label": "Share among teams by guaranteed quota"}
    assert IdlePolicy.objects.get(flavor=flavor).mode == SHARE
    assert AuditEvent.objects.filter(action="idle_policy.set", actor=finance_user).count() == 1


@pytest.mark.parametrize(("body", "status", "sentence"), [
    ({"mode": "everyone"}, 400, "“everyone” is not an idle policy"),
    ({"flavor": "nope", "mode": "share"}, 400, "flavor"),
    ({"mode": "share", "updated_at": "2020-01-01"}, 400, "updated_at cannot be set here"),
])
def test_a_refused_idle_policy_through_the_api_says_why_and_writes_nothing(as_user, finance_user, flavor, body, status,
                                                                           sentence):
    response = as_user(finance_user).post(IDLE_API, {"flavor": flavor.slug, **body}, content_type="application/json")
    assert response.status_code == status
    assert sentence in response.json()["message"]
    assert not IdlePolicy.objects.exists()


@pytest.mark.parametrize("role", ["member", "lead", "outsider"])
def test_team_members_and_leads_neither_read_nor_set_idle_policies_through_the_api(request, as_user, role, flavor):
    client = as_user(request.getfixturevalue(role))
    assert client.get(IDLE_API).status_code == 403
    assert client.post(IDLE_API, {"flavor": flavor.slug, "mode": "share"},
                       content_type="application/json").status_code == 403
    assert not IdlePolicy.objects.exists()
