"""The server-rendered pages: who sees what, the quota story through forms and htmx, isolation,
CSRF, and a number of queries that does not grow with the rows on a page."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal import tokens
from portal.audit import audit_record
from portal.models import ApiToken, AuditEvent, Notification
from portal.notifications import notify
from tenants import services
from tenants.models import Membership, QuotaGrant, QuotaRequest, Team
from tests.factories import (
    MembershipFactory,
    QuotaGrantFactory,
    QuotaRequestFactory,
    QuotaRequestLineFactory,
    TeamFactory,
    UserFactory,
)
from tests.helpers import file_request

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}





def form_data(team: str = "vision", lines: list[tuple[str, str]] | None = None, justification: str = "New detector",
              ends_on: str = "") -> dict[str, Any]:
    lines = lines if lines is not None else [("h100-80gb", "4")]
    return {
        "team": team,
        "flavor": [flavor for flavor, _ in lines],
        "units": [units for _, units in lines],
        "justification": justification,
        "ends_on": ends_on,
    }


# --- Every page renders for the right people ----------------------------------------------------


def ok(response: Any) -> str:
    """The body of a page that must have rendered: what a page does not show means nothing on an error page."""
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def heading(page: str) -> str:
    """The page's <h1>, which says which page it is: an error page or the wrong template has another."""
    found = re.search(r"<h1[^>]*>(.*?)</h1>", page, re.DOTALL)
    return found.group(1).strip() if found else ""


# Each page with the heading it must show ({username}: the visitor's).
PAGES = [
    ("tenants:dashboard", [], "Hello, {username}"),
    ("tenants:team-list", [], "Teams"),
    ("tenants:team-detail", ["vision"], "Vision"),
    ("tenants:team-requests", ["vision"], "Vision"),
    ("tenants:team-audit", ["vision"], "Vision"),
    ("tenants:quota-request-create", [], "Request GPU quota"),
    ("tenants:quota-request-list", [], "Quota requests"),
    ("tenants:approvals", [], "Approvals"),
    ("tenants:audit", [], "Audit trail"),
    ("api-tokens", [], "API tokens"),
    ("notifications", [], "Notifications"),
]


@pytest.mark.parametrize(("name", "args", "title"), PAGES)
@pytest.mark.parametrize("who", ["member", "lead", "admin_user", "finance_user"])
def test_every_page_renders_for_members_leads_admins_and_finance(
    name, args, title, who, request, team, flavor, member, lead, as_user,
):
    user = request.getfixturevalue(who)
    response = as_user(user).get(reverse(name, args=args))
    assert response.status_code == 200
    assert heading(response.content.decode()) == title.format(username=user.username)


@pytest.mark.parametrize(("name", "args", "title"), PAGES)
def test_every_page_sends_anonymous_visitors_to_the_login_page(name, args, title, client, team):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_dashboard_shows_my_teams_capacity_pending_requests_and_the_inbox_count(team, member, lead, flavor, as_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    QuotaGrantFactory(team=TeamFactory(slug="nlp"), flavor=flavor, units=8)
    file_request(team, member, flavor, 2)

    lead_page = ok(as_user(lead).get(reverse("tenants:dashboard")))
    member_page = ok(as_user(member).get(reverse("tenants:dashboard")))

    assert "Vision" in member_page and "H100 80GB" in member_page
    assert "<strong>4</strong> your teams" in member_page
    assert "<strong>12</strong> guaranteed to all teams" in member_page
    assert "<strong>4</strong> free of 16" in member_page
    assert "+2 H100 80GB" in member_page
    assert 'data-testid="inbox-count"' not in member_page
    assert 'data-testid="inbox-count"' in lead_page
    assert "request for you to decide" in lead_page


def test_the_team_list_shows_only_my_teams_but_finance_and_admins_see_all(
    team, other_team, member, finance_user, admin_user, as_user,
):
    mine = ok(as_user(member).get(reverse("tenants:team-list")))
    assert "Vision" in mine and "Speech" not in mine
    for user in (finance_user, admin_user):
        everything = ok(as_user(user).get(reverse("tenants:team-list")))
        assert "Vision" in everything and "Speech" in everything


def test_the_team_list_paginates_by_25(admin_user, as_user):
    TeamFactory.create_batch(30)
    page_one = as_user(admin_user).get(reverse("tenants:team-list")).content.decode()
    assert "Page 1 of 2" in page_one
    fragment = ok(as_user(admin_user).get(reverse("tenants:team-list") + "?page=2", **HTMX))
    assert fragment.lstrip().startswith('<div id="team-rows">')
    assert "Page 2 of 2" in fragment and "<html" not in fragment


def test_finance_sees_any_team_page_but_cannot_manage_its_members(team, member, lead, finance_user, as_user):
    client = as_user(finance_user)
    page = ok(client.get(reverse("tenants:team-detail", args=["vision"])))
    assert "alice" in page and "lena" in page
    assert "Add a member" not in page and "Remove" not in page
    lead_page = ok(as_user(lead).get(reverse("tenants:team-detail", args=["vision"])))
    assert "Add a member" in lead_page and "Remove" in lead_page
    response = client.post(reverse("tenants:membership-add", args=["vision"]), {"username": "fiona", "role": "member"}, **HTMX)
    assert response.status_code == 403
    assert not Membership.objects.filter(team=team, user=finance_user).exists()


def test_a_plain_member_sees_no_decision_buttons_and_no_member_controls(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 2)
    client = as_user(member)
    detail = ok(client.get(reverse("tenants:quota-request-detail", args=[qr.pk])))
    assert "Approve" not in detail and "Cancel this request" in detail
    team_page = ok(client.get(reverse("tenants:team-detail", args=["vision"])))
    assert "Add a member" not in team_page
    lena = as_user(lead)
    assert "Approve" in ok(lena.get(reverse("tenants:quota-request-detail", args=[qr.pk])))
    assert "Add a member" in ok(lena.get(reverse("tenants:team-detail", args=["vision"])))
    assert client.post(reverse("tenants:quota-request-approve", args=[qr.pk]), **HTMX).status_code == 403
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING


# --- The quota story through the pages ----------------------------------------------------------


def test_the_quota_story_from_the_form_to_the_approved_grant_on_the_team_page(team, member, lead, flavor, as_user):
    alice, lena = as_user(member), as_user(lead)

    response = alice.post(reverse("tenants:quota-request-create"), form_data(lines=[("h100-80gb", "4"), ("", "")]))
    qr = QuotaRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("tenants:team-detail", args=["vision"])
    followed = alice.get(response["Location"]).content.decode()
    assert f"Request #{qr.pk} filed: +4 H100 80GB for vision" in followed

    inbox = lena.get(reverse("tenants:approvals")).content.decode()
    assert f"#{qr.pk}" in inbox and "alice" in inbox and "+4 H100 80GB" in inbox

    row = lena.post(reverse("tenants:quota-request-approve", args=[qr.pk]), {"note": "Go for it"}, **HTMX)
    fragment = row.content.decode()
    assert row.status_code == 200
    assert fragment.lstrip().startswith(f'<tr id="approval-{qr.pk}"')
    assert "Approved" in fragment and "Go for it" in fragment
    assert "hx-post" not in fragment

    team_page = lena.get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert "<strong>4</strong> guaranteed" in team_page
    assert f'href="{reverse("tenants:quota-request-detail", args=[qr.pk])}">#{qr.pk}</a>' in team_page
    assert f"lena approved request #{qr.pk}: +4 H100 80GB for vision" in team_page
    assert Notification.objects.filter(recipient=member, message__startswith=f"lena approved your request #{qr.pk}").exists()
    assert "No pending requests — you're all caught up." in lena.get(reverse("tenants:approvals")).content.decode()


def test_approval_over_capacity_is_refused_in_the_row_with_the_numbers_and_keeps_the_buttons(
    team, other_team, member, lead, flavor, as_user,
):
    QuotaGrantFactory(team=other_team, flavor=flavor, units=14)
    qr = file_request(team, member, flavor, 4)

    fragment = as_user(lead).post(reverse("tenants:quota-request-approve", args=[qr.pk]), {"note": "ok"}, **HTMX).content.decode()

    assert "H100 80GB has 16 units and teams already hold 14; +4 would make 18, so at most 2 more can be approved" in fragment
    assert 'role="alert"' in fragment
    assert "Approve</button>" in fragment and "Reject</button>" in fragment
    assert 'value="ok"' in fragment
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING
    assert not QuotaGrant.objects.filter(team=team).exists()


def test_a_lead_rejects_in_place_and_the_requester_cancels_from_the_detail_page(team, member, lead, flavor, as_user):
    rejected = file_request(team, member, flavor, 2)
    cancelled = file_request(team, member, flavor, 1)

    reject = reverse("tenants:quota-request-reject", args=[rejected.pk])
    fragment = as_user(lead).post(reject, {"note": "Use the MIG slices"}, **HTMX)
    assert "Rejected" in fragment.content.decode()

    alice = as_user(member)
    response = alice.post(reverse("tenants:quota-request-cancel", args=[cancelled.pk]),
                          {"next": reverse("tenants:quota-request-detail", args=[cancelled.pk])})
    assert response.status_code == 302
    assert response["Location"] == reverse("tenants:quota-request-detail", args=[cancelled.pk])
    detail = alice.get(response["Location"]).content.decode()
    assert f"Request #{cancelled.pk} cancelled." in detail
    assert 'data-testid="status">Cancelled' in detail
    assert {qr.status for qr in QuotaRequest.objects.all()} == {"rejected", "cancelled"}


def test_deciding_an_already_decided_request_shows_the_conflict_in_the_row(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 2)
    services.quota_request_reject(quota_request=qr, approver=lead)

    fragment = as_user(lead).post(reverse("tenants:quota-request-approve", args=[qr.pk]), **HTMX).content.decode()

    assert f"Request #{qr.pk} is rejected; only a pending request can be approved." in fragment
    assert "Rejected" in fragment


def test_a_non_htmx_approval_redirects_back_with_a_message(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 2)
    client = as_user(lead)
    response = client.post(reverse("tenants:quota-request-approve", args=[qr.pk]), {"next": reverse("tenants:approvals")})
    assert response.status_code == 302 and response["Location"] == reverse("tenants:approvals")
    assert f"Request #{qr.pk} approved." in client.get(response["Location"]).content.decode()


def test_a_redirect_after_a_decision_never_leaves_the_site(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 2)
    response = as_user(lead).post(reverse("tenants:quota-request-reject", args=[qr.pk]), {"next": "https://evil.example.com/"})
    assert response["Location"] == reverse("tenants:quota-request-detail", args=[qr.pk])


# --- The request form ---------------------------------------------------------------------------


def test_the_live_preview_tells_where_the_flavor_stands_for_the_team(team, other_team, member, flavor, as_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    QuotaGrantFactory(team=other_team, flavor=flavor, units=8)
    client = as_user(member)
    url = reverse("tenants:quota-preview")

    fits = client.get(url, {"team": "vision", "flavor": "h100-80gb", "units": "4"}, **HTMX).content.decode()
    too_many = client.get(url, {"team": "vision", "flavor": "h100-80gb", "units": "6"}, **HTMX).content.decode()
    not_a_number = client.get(url, {"team": "vision", "flavor": "h100-80gb", "units": "four"}, **HTMX).content.decode()
    no_flavor = client.get(url, {"team": "vision", "flavor": "", "units": "4"}, **HTMX).content.decode()

    assert "<strong>H100 80GB</strong>: 16 units in the cluster, 12 guaranteed, 4 free." in fits
    assert "vision holds 4; after this request 8." in " ".join(fits.split())
    assert 'class="hint good"' in fits
    assert 'class="hint bad"' in too_many and "only 4 units free" in too_many
    assert 'class="hint bad"' in not_a_number and "“four” is not a whole number of units" in not_a_number
    assert "Choose a flavor" in no_flavor


def test_the_preview_flags_giving_back_more_than_the_team_holds(team, member, flavor, as_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=2)
    preview = as_user(member).get(reverse("tenants:quota-preview"), {"team": "vision", "flavor": "h100-80gb", "units": "-3"})
    fragment = preview.content.decode()
    assert 'class="hint bad"' in fragment and "only 2 of its units are permanent" in fragment


def test_the_form_has_the_live_preview_wired_to_each_line(team, member, flavor, as_user):
    page = as_user(member).get(reverse("tenants:quota-request-create") + "?team=vision").content.decode()
    assert page.count('name="units"') == 5
    assert f'hx-get="{reverse("tenants:quota-preview")}"' in page
    assert 'hx-trigger="input changed delay:300ms, refresh"' in page
    assert '<option value="vision" selected>' in page


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (form_data(lines=[("h100-80gb", "four")]), "H100 80GB: “four” is not a whole number of units."),
        (form_data(lines=[("h100-80gb", "")]), "H100 80GB: how many units?"),
        (form_data(lines=[("", "3")]), "Choose a flavor for the line with “3” units."),
        (form_data(lines=[("h100-80gb", "40")]), "at most 16 more can ever be granted"),
        (form_data(lines=[("", "")]), "Add at least one flavor with a number of units."),
        (form_data(lines=[("h100-80gb", "4")], justification=""), "This field is required."),
        (form_data(lines=[("h100-80gb", "4")], ends_on="2001-01-01"), "The end date must be after today."),
        (form_data(lines=[("h100-80gb", "2"), ("h100-80gb", "1")]), "appears twice"),
    ],
)
def test_bad_input_is_explained_and_the_form_keeps_what_was_typed(data, message, team, member, flavor, as_user):
    response = as_user(member).post(reverse("tenants:quota-request-create"), data)
    page = response.content.decode()
    assert response.status_code == 200
    assert message in page
    assert not QuotaRequest.objects.exists()
    for flavor_slug, units in zip(data["flavor"], data["units"], strict=True):
        if units:
            assert f'value="{units}"' in page
        if flavor_slug:
            assert f'<option value="{flavor_slug}" selected>' in page
    if data["justification"]:
        assert data["justification"] in page


def test_the_form_offers_only_teams_the_user_may_request_quota_for(
    team, other_team, member, finance_user, admin_user, flavor, as_user,
):
    mine = ok(as_user(member).get(reverse("tenants:quota-request-create")))
    assert 'value="vision"' in mine and 'value="speech"' not in mine
    finance = as_user(finance_user).get(reverse("tenants:quota-request-create")).content.decode()
    assert "no team to request quota for" in finance
    admin = as_user(admin_user).get(reverse("tenants:quota-request-create")).content.decode()
    assert 'value="vision"' in admin and 'value="speech"' in admin

    response = as_user(member).post(reverse("tenants:quota-request-create"), form_data(team="speech"))
    assert "Select a valid choice" in response.content.decode()
    assert not QuotaRequest.objects.exists()


def test_a_request_can_hold_several_lines_and_give_units_back(team, member, flavor, mig_flavor, as_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    response = as_user(member).post(
        reverse("tenants:quota-request-create"),
        form_data(lines=[("h100-80gb", "-2"), ("", ""), ("a100-1g10gb", "14")]),
    )
    assert response.status_code == 302
    qr = QuotaRequest.objects.get()
    assert sorted((line.flavor.slug, line.units) for line in qr.lines.all()) == [("a100-1g10gb", 14), ("h100-80gb", -2)]


# --- Members managed in place ---------------------------------------------------------------------


def test_a_lead_adds_changes_and_removes_members_in_place(team, member, lead, as_user):
    UserFactory(username="bob")
    client = as_user(lead)

    added = client.post(reverse("tenants:membership-add", args=["vision"]), {"username": "bob", "role": "member"}, **HTMX)
    assert added.content.decode().lstrip().startswith('<section class="card" id="members">')
    assert "Added bob to vision as member." in added.content.decode()
    bob = Membership.objects.get(team=team, user__username="bob")

    promoted = client.post(reverse("tenants:membership-role", args=["vision", bob.pk]), {"role": "lead"}, **HTMX)
    assert "bob is now team lead." in promoted.content.decode()
    removed = client.post(reverse("tenants:membership-remove", args=["vision", bob.pk]), **HTMX)
    assert "Removed bob from vision." in removed.content.decode()

    assert not Membership.objects.filter(pk=bob.pk).exists()
    trail = list(AuditEvent.objects.filter(team_id=team.pk).values_list("message", flat=True))
    assert "lena added bob to vision as member" in trail and "lena removed bob from vision" in trail


def test_member_refusals_are_shown_inline(team, member, lead, as_user):
    client = as_user(lead)
    unknown = client.post(reverse("tenants:membership-add", args=["vision"]), {"username": "nobody", "role": "member"}, **HTMX)
    assert "There is no active account “nobody” you can add" in unknown.content.decode()
    assert 'value="nobody"' in unknown.content.decode()
    twice = client.post(reverse("tenants:membership-add", args=["vision"]), {"username": "alice", "role": "member"}, **HTMX)
    assert "alice is already in vision." in twice.content.decode()
    last_lead = Membership.objects.get(team=team, user=lead)
    demoted = client.post(reverse("tenants:membership-role", args=["vision", last_lead.pk]), {"role": "member"}, **HTMX)
    assert "lena is the only lead of vision; make someone else lead first." in demoted.content.decode()
    assert Membership.objects.get(pk=last_lead.pk).role == Membership.Role.LEAD


def test_member_changes_without_htmx_redirect_to_the_team_page(team, member, lead, as_user):
    UserFactory(username="bob")
    client = as_user(lead)
    response = client.post(reverse("tenants:membership-add", args=["vision"]), {"username": "bob", "role": "lead"})
    assert response.status_code == 302 and response["Location"] == reverse("tenants:team-detail", args=["vision"])
    assert "Added bob to vision as team lead." in client.get(response["Location"]).content.decode()


# --- Paging fragments, filters, audit --------------------------------------------------------------


def test_team_history_and_audit_page_through_htmx_fragments(team, member, flavor, as_user):
    for _ in range(30):
        QuotaRequestLineFactory(request=QuotaRequestFactory(team=team, requester=member), flavor=flavor)
        audit_record(actor=member, action="test", obj=team, team_id=team.pk, message="alice did a thing")
    client = as_user(member)

    page = client.get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert page.count("Page 1 of 2 · 30 in all") == 2
    assert f'hx-get="{reverse("tenants:team-requests", args=["vision"])}?page=2"' in page
    rows = client.get(reverse("tenants:team-requests", args=["vision"]) + "?page=2", **HTMX).content.decode()
    assert rows.lstrip().startswith('<div id="request-rows">') and "Page 2 of 2" in rows
    audit = client.get(reverse("tenants:team-audit", args=["vision"]) + "?page=2", **HTMX).content.decode()
    assert audit.lstrip().startswith('<div id="audit-rows">') and "Page 2 of 2" in audit
    full = ok(client.get(reverse("tenants:team-requests", args=["vision"]) + "?page=2"))
    assert heading(full) == "Vision" and "Page 2 of 2" in full


def test_the_request_list_filters_by_status_and_keeps_the_filter_when_paging(team, member, lead, flavor, as_user):
    for _ in range(27):
        QuotaRequestLineFactory(request=QuotaRequestFactory(team=team, requester=member, status="approved"), flavor=flavor)
    file_request(team, member, flavor, 1)
    client = as_user(member)

    pending = client.get(reverse("tenants:quota-request-list"), {"status": "pending"}).content.decode()
    assert pending.count('class="status pending"') == 1
    approved = client.get(reverse("tenants:quota-request-list"), {"status": "approved"}, **HTMX).content.decode()
    assert "Page 1 of 2 · 27 in all" in approved
    assert 'href="?status=approved&amp;page=2"' in approved
    expired = client.get(reverse("tenants:quota-request-list"), {"status": "expired"}).content.decode()
    assert "No requests match this filter." in expired


def test_the_audit_page_filters_by_team_and_shows_sentences(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 4)
    page = as_user(lead).get(reverse("tenants:audit"), {"team": "vision"}).content.decode()
    assert f"alice requested +4 H100 80GB for vision (request #{qr.pk})" in page


@pytest.mark.parametrize("team_filter", ["vision", "no-such-team"], ids=["invisible", "missing"])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_the_audit_page_filtered_by_a_team_you_cannot_see_is_empty_like_a_missing_team(
    team, member, flavor, outsider, as_user, team_filter, htmx
):
    file_request(team, member, flavor, 4)
    response = as_user(outsider).get(reverse("tenants:audit"), {"team": team_filter}, **(HTMX if htmx else {}))

    assert response.status_code == 200
    page = response.content.decode()
    assert "Nothing has happened here yet." in page
    assert "requested +4" not in page


def test_the_request_list_leaves_out_a_filter_value_it_does_not_understand(team, member, flavor, as_user):
    file_request(team, member, flavor, 2)
    response = as_user(member).get(reverse("tenants:quota-request-list"), {"status": "done", "mine": "maybe"})

    assert response.status_code == 200
    assert len(response.context["requests"]) == 1
    assert (response.context["status"], response.context["mine"]) == ("", False)


# --- Isolation: another team's objects are 404 ----------------------------------------------------


@pytest.fixture
def vision_objects(team, member, lead, flavor) -> dict[str, Any]:
    qr = file_request(team, member, flavor, 2)
    token, _ = tokens.api_token_create(user=member, name="alice-workstation", expires_in_days=30)
    note = notify(recipients=[member], message="note-for-alice", url="/")[0]
    return {"qr": qr, "membership": Membership.objects.get(team=team, user=member), "token": token, "note": note}


ISOLATION_CASES: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
    ("team detail", "get", lambda o: reverse("tenants:team-detail", args=["vision"])),
    ("team request rows", "get", lambda o: reverse("tenants:team-requests", args=["vision"])),
    ("team audit rows", "get", lambda o: reverse("tenants:team-audit", args=["vision"])),
    ("team cluster state", "get", lambda o: reverse("tenants:team-cluster", args=["vision"])),
    ("member add", "post", lambda o: reverse("tenants:membership-add", args=["vision"])),
    ("member role", "post", lambda o: reverse("tenants:membership-role", args=["vision", o["membership"].pk])),
    ("member remove", "post", lambda o: reverse("tenants:membership-remove", args=["vision", o["membership"].pk])),
    ("member role under my own team", "post", lambda o: reverse("tenants:membership-role", args=["speech", o["membership"].pk])),
    ("member remove under my own team", "post",
     lambda o: reverse("tenants:membership-remove", args=["speech", o["membership"].pk])),
    ("request detail", "get", lambda o: reverse("tenants:quota-request-detail", args=[o["qr"].pk])),
    ("approve", "post", lambda o: reverse("tenants:quota-request-approve", args=[o["qr"].pk])),
    ("reject", "post", lambda o: reverse("tenants:quota-request-reject", args=[o["qr"].pk])),
    ("cancel", "post", lambda o: reverse("tenants:quota-request-cancel", args=[o["qr"].pk])),
    ("preview", "get", lambda o: reverse("tenants:quota-preview") + "?team=vision&flavor=h100-80gb&units=1"),
    ("preview without a flavor", "get", lambda o: reverse("tenants:quota-preview") + "?team=vision"),
    ("token revoke", "post", lambda o: f"/tokens/{o['token'].pk}/revoke/"),
    ("notification open", "get", lambda o: reverse("notification-open", args=[o["note"].pk])),
]


@pytest.mark.parametrize(("case", "method", "url"), ISOLATION_CASES, ids=[case[0] for case in ISOLATION_CASES])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_an_outsider_gets_404_for_every_object_of_another_team(case, method, url, htmx, vision_objects, outsider, as_user):
    client = as_user(outsider)
    headers = HTMX if htmx else {}
    data = {"username": "oscar", "role": "lead", "note": "mine now"} if method == "post" else None
    response = getattr(client, method)(url(vision_objects), data, **headers)

    assert response.status_code == 404
    vision_objects["qr"].refresh_from_db()
    assert vision_objects["qr"].status == QuotaRequest.Status.PENDING
    assert Membership.objects.filter(pk=vision_objects["membership"].pk, role="member").exists()
    assert not Membership.objects.filter(team__slug="vision", user=outsider).exists()
    assert ApiToken.objects.get(pk=vision_objects["token"].pk).revoked_at is None
    assert Notification.objects.get(pk=vision_objects["note"].pk).read_at is None


@pytest.fixture
def speech_objects(other_team, outsider, flavor) -> dict[str, Any]:
    """The outsider's own rows, of the same kinds: each list page must show these, or not
    showing vision's would prove nothing."""
    qr = file_request(other_team, outsider, flavor, 3)
    tokens.api_token_create(user=outsider, name="oscar-workstation", expires_in_days=30)
    notify(recipients=[outsider], message="note-for-oscar", url="/")
    return {"qr": qr}


# Each list page with what it must show the outsider of their own (the speech team's) rows.
LIST_PAGES: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("tenants:dashboard", lambda o: "Speech"),
    ("tenants:team-list", lambda o: "Speech"),
    ("tenants:quota-request-list", lambda o: f"#{o['qr'].pk}<"),
    ("tenants:approvals", lambda o: f"#{o['qr'].pk}<"),
    ("tenants:audit", lambda o: f"oscar requested +3 H100 80GB for speech (request #{o['qr'].pk})"),
    ("notifications", lambda o: "note-for-oscar"),
    ("api-tokens", lambda o: "oscar-workstation"),
]


@pytest.mark.parametrize(("name", "own"), LIST_PAGES, ids=[name for name, _ in LIST_PAGES])
def test_list_pages_never_show_another_teams_rows(name, own, vision_objects, speech_objects, outsider, as_user):
    page = ok(as_user(outsider).get(reverse(name)))
    assert own(speech_objects) in page
    qr = vision_objects["qr"]
    assert "Vision" not in page
    assert f"#{qr.pk}<" not in page
    assert "alice" not in page
    assert "alice-workstation" not in page and "note-for-alice" not in page


# --- CSRF -----------------------------------------------------------------------------------------


def test_htmx_posts_without_the_csrf_token_are_refused_and_change_nothing(team, member, lead, flavor, as_user):
    qr = file_request(team, member, flavor, 2)
    client = as_user(lead, enforce_csrf=True)

    refused = client.post(reverse("tenants:quota-request-approve", args=[qr.pk]), **HTMX)
    qr.refresh_from_db()
    assert refused.status_code == 403 and qr.status == QuotaRequest.Status.PENDING

    page = client.get(reverse("tenants:approvals"))
    token = page.cookies["csrftoken"].value
    assert "X-CSRFToken" in page.content.decode()
    accepted = client.post(reverse("tenants:quota-request-approve", args=[qr.pk]), HTTP_X_CSRFTOKEN=token, **HTMX)
    qr.refresh_from_db()
    assert accepted.status_code == 200 and qr.status == QuotaRequest.Status.APPROVED


# --- Bounded queries --------------------------------------------------------------------------------


def count_queries(client: Any, url: str, **headers: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200
    return len(captured)


def fill_team(team: Team, requester: Any, flavors: list[Any], n: int) -> None:
    for i in range(n):
        qr = QuotaRequestFactory.create(team=team, requester=requester, status="pending" if i % 2 else "approved")
        for flavor in flavors:
            QuotaRequestLineFactory(request=qr, flavor=flavor, units=1)
        person = UserFactory.create()
        MembershipFactory(team=team, user=person)
        QuotaGrantFactory(team=team, flavor=flavors[i % len(flavors)], units=1, request=qr,
                          valid_until=timezone.now() + dt.timedelta(days=i + 1) if i % 3 else None)
        audit_record(actor=person, action="test", obj=qr, team_id=team.pk, message=f"{person.username} did thing {i}")
        notify(recipients=[requester], message=f"note {i}", url="/")


@pytest.fixture
def site_of(team, lead, flavor, mig_flavor) -> Callable[[int], None]:
    def build(n: int) -> None:
        Team.objects.exclude(pk=team.pk).delete()
        fill_team(team, lead, [flavor, mig_flavor], n)
        for i in range(n):
            extra = TeamFactory()
            MembershipFactory(team=extra, user=lead, role=Membership.Role.LEAD)
            QuotaGrantFactory(team=extra, flavor=flavor, units=0 if i else 1)
    return build


QUERY_PAGES = [
    ("dashboard", lambda: reverse("tenants:dashboard"), {}),
    ("team page", lambda: reverse("tenants:team-detail", args=["vision"]), {}),
    ("team request rows", lambda: reverse("tenants:team-requests", args=["vision"]), HTMX),
    ("team list", lambda: reverse("tenants:team-list"), {}),
    ("approvals", lambda: reverse("tenants:approvals"), {}),
    ("request list", lambda: reverse("tenants:quota-request-list"), {}),
    ("audit", lambda: reverse("tenants:audit"), {}),
    ("notifications", lambda: reverse("notifications"), {}),
]


@pytest.mark.parametrize(("page", "url", "headers"), QUERY_PAGES, ids=[p[0] for p in QUERY_PAGES])
def test_pages_run_the_same_number_of_queries_for_3_rows_and_for_30(page, url, headers, site_of, lead, as_user,
                                                                      django_assert_max_num_queries):
    client = as_user(lead)
    site_of(3)
    few = count_queries(client, url(), **headers)
    site_of(30)
    with django_assert_max_num_queries(few):
        response = client.get(url(), **headers)
    assert response.status_code == 200
    assert few <= 20


# --- Admin --------------------------------------------------------------------------------------------


def test_the_admin_refuses_to_lower_a_flavor_below_its_guarantees_with_a_message(team, flavor, admin_user, as_user):
    QuotaGrantFactory(team=team, flavor=flavor, units=10)
    client = as_user(admin_user)
    url = reverse("admin:tenants_flavor_change", args=[flavor.pk])
    data = {
        "name": flavor.name, "slug": flavor.slug, "resource_name": flavor.resource_name, "sharing_mode": "exclusive",
        "gpu_model": flavor.gpu_model, "fraction_numerator": 1, "fraction_denominator": 1, "capacity_units": 8,
        "resource_per_unit": 1, "memory_gib_per_unit": 0, "extra_resources": "[]", "node_labels": "{}", "tolerations": "[]",
        "is_active": "on",
        "created_at_0": "2024-01-01", "created_at_1": "00:00:00",
    }
    response = client.post(url, data, follow=True)
    assert "teams are guaranteed 10 units, so capacity cannot drop to 8" in response.content.decode()
    flavor.refresh_from_db()
    assert flavor.capacity_units == 16

    data["capacity_units"] = 24
    client.post(url, data)
    flavor.refresh_from_db()
    assert flavor.capacity_units == 24
    assert AuditEvent.objects.filter(action="flavor.updated").exists()


def test_teams_created_in_the_admin_go_through_the_service(admin_user, as_user):
    client = as_user(admin_user)
    response = client.post(
        reverse("admin:tenants_team_add"), {"slug": "robotics", "name": "Robotics", "cost_center": "CC-9", "description": ""},
    )
    assert response.status_code == 302
    team = Team.objects.get(slug="robotics")
    assert AuditEvent.objects.get(action="team.created", team_id=team.pk).message == "root created team robotics (Robotics)"
    assert client.get(reverse("admin:tenants_team_change", args=[team.pk])).status_code == 200


def test_admin_member_changes_go_through_the_services(team, lead, admin_user, as_user):
    bob = UserFactory.create(username="bob")
    lead_membership = Membership.objects.get(team=team, user=lead)
    client = as_user(admin_user)
    url = reverse("admin:tenants_team_change", args=[team.pk])
    data = {
        "name": "Vision", "cost_center": "CC-100", "description": "",
        "may_borrow": "on", "lends_idle": "on", "fair_share_weight": "1", "cpu_limit_cores": "64", "memory_limit_gib": "512",
        "pod_limit": "100",
        "memberships-TOTAL_FORMS": "2", "memberships-INITIAL_FORMS": "1",
        "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-id": str(lead_membership.pk), "memberships-0-team": str(team.pk),
        "memberships-0-user": str(lead.pk), "memberships-0-role": "lead",
        "memberships-1-id": "", "memberships-1-team": str(team.pk),
        "memberships-1-user": str(bob.pk), "memberships-1-role": "member",
    }
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert AuditEvent.objects.filter(message="root added bob to vision as member").exists()

    data.update({"memberships-1-id": "", "memberships-TOTAL_FORMS": "1", "memberships-0-DELETE": "on"})
    response = client.post(url, data, follow=True)
    assert "lena is the only lead of vision" in response.content.decode()
    assert Membership.objects.filter(pk=lead_membership.pk).exists()


def test_requests_and_grants_are_read_only_in_the_admin(team, member, flavor, admin_user, as_user):
    qr = file_request(team, member, flavor, 2)
    client = as_user(admin_user)
    assert client.get(reverse("admin:tenants_quotarequest_changelist")).status_code == 200
    assert client.get(reverse("admin:tenants_quotagrant_changelist")).status_code == 200
    page = ok(client.get(reverse("admin:tenants_quotarequest_change", args=[qr.pk])))
    assert "H100 80GB" in page and 'name="_save"' not in page
    assert client.get(reverse("admin:tenants_quotarequest_add")).status_code == 403


# --- API tokens and notifications ---------------------------------------------------------------------


def test_a_new_token_secret_is_shown_once_and_revoked_in_place(member, as_user):
    client = as_user(member)
    created = client.post(reverse("api-tokens"), {"name": "laptop", "expires_in_days": "30"}).content.decode()
    token = ApiToken.objects.get(user=member)
    assert '<code class="secret" data-testid="secret" id="new-secret">' in created
    assert "laptop" in created
    again = ok(client.get(reverse("api-tokens")))
    assert 'class="secret"' not in again and "Revoke" in again

    row = ok(client.post(f"/tokens/{token.pk}/revoke/", **HTMX))
    assert row.lstrip().startswith(f'<tr id="token-{token.pk}">')
    assert "Revoked" in row and "hx-post" not in row


def test_the_revoke_button_posts_to_the_page_not_to_the_api(member, as_user):
    token, _ = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    page = as_user(member).get(reverse("api-tokens")).content.decode()
    assert f'hx-post="/tokens/{token.pk}/revoke/"' in page


def test_notifications_list_link_to_their_target_and_can_all_be_marked_read(member, as_user):
    notes = notify(recipients=[member], message="lena approved your request #7", url="/teams/vision/")
    notify(recipients=[member], message="second", url="")
    client = as_user(member)
    page = client.get(reverse("notifications")).content.decode()
    assert reverse("notification-open", args=[notes[0].pk]) in page
    assert 'data-testid="unread-count">2<' in page
    fragment = client.get(reverse("notifications"), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="notification-list">')

    response = client.post(reverse("notifications-read"), **HTMX)
    assert response["HX-Refresh"] == "true"
    assert not Notification.objects.filter(recipient=member, read_at__isnull=True).exists()


# --- The team in the cluster ---------------------------------------------------------------------


def test_the_team_page_loads_the_live_cluster_picture(team, member, flavor, as_user):
    from tenants import reconcile
    from tests.factories import QuotaGrantFactory

    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    client = as_user(member)

    page = client.get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert f'hx-get="{reverse("tenants:team-cluster", args=["vision"])}"' in page

    fragment = client.get(reverse("tenants:team-cluster", args=["vision"]), **HTMX).content.decode()
    assert 'data-testid="sync-state">In sync<' in fragment
    assert "Last applied" in fragment
    assert "Checked against the cluster" not in fragment  # no team pass has run yet

    reconcile.cluster_reconcile()
    fragment = client.get(reverse("tenants:team-cluster", args=["vision"]), **HTMX).content.decode()
    assert "Checked against the cluster" in fragment
    row = fragment[fragment.index('data-testid="usage-row"'):]
    assert "H100 80GB" in row and '<td class="num">4</td>' in row


def test_a_failed_apply_says_why_on_the_team_page(team, member, as_user):
    team.sync_error = 'ClusterQueue vision: rejected as invalid: spec.cohortName: Invalid value'
    team.save()
    fragment = as_user(member).get(reverse("tenants:team-cluster", args=["vision"]), **HTMX).content.decode()
    assert 'data-testid="sync-state">Error<' in fragment
    assert "The last apply failed: ClusterQueue vision: rejected as invalid" in fragment


def test_platform_admins_see_capacity_guaranteed_used_and_borrowed_per_flavor(team, admin_user, member, flavor, as_user):
    from tests.factories import QuotaGrantFactory

    QuotaGrantFactory(team=team, flavor=flavor, units=6)
    page = as_user(admin_user).get(reverse("tenants:capacity")).content.decode()
    row = page[page.index('data-testid="capacity-row"'):]
    assert "H100 80GB" in row and '<td class="num">16</td><td class="num">6</td>' in row
    assert as_user(member).get(reverse("tenants:capacity")).status_code == 403


def test_the_capacity_bars_say_what_each_colour_means(team, admin_user, flavor, as_user):
    from tests.factories import QuotaGrantFactory

    QuotaGrantFactory(team=team, flavor=flavor, units=6)
    page = as_user(admin_user).get(reverse("tenants:capacity")).content.decode()
    legend = page[page.index('data-testid="capacity-legend"'):].split("</p>")[0]
    assert re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", legend)).strip().endswith(
        "In each bar: in use now guaranteed not guaranteed")
    for part in ("used", "all", "free"):  # each colour of the bar has its swatch in the legend
        assert f'<span class="swatch {part}">' in legend
    bar = page[page.index('<svg class="bar"'):].split("</svg>")[0]
    assert '<rect class="all" width="38"' in bar and '<rect class="used" width="0"' in bar
