"""Weights between teams (issue 27 §2): who may set a team's or department's fair-share weight and
how bad input is refused; the weight its ClusterQueue and Cohort carry; Volcano's refusal; and the
team page's share against its fair share. The convergence itself runs on the real Kueue and the
simulated one in tests/contract/test_fair_share_contract.py."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from portal.errors import DomainError
from portal.models import AuditEvent
from tenants import cluster_selectors, desired, services
from tenants.models import Department, Team
from tenants.queueing import kueue
from tenants.queueing.base import QueueUsage
from tests.conftest import login
from tests.factories import TeamFactory
from tests.tenants.test_platform_pages import team_form

pytestmark = pytest.mark.django_db


def test_a_platform_admin_sets_a_weight_and_the_teams_queue_and_the_departments_cohort_carry_it(team, admin_user, lead):
    services.team_update(actor=admin_user, team=team, fair_share_weight=Decimal("2.5"))
    _, spec = desired.team_specs([team.pk])[team.pk]
    assert kueue.make_cluster_queue(team=spec)["spec"]["fairSharing"] == {"weight": "2.5"}
    event = AuditEvent.objects.filter(action="team.updated", team_id=team.pk).latest("pk")
    assert "the fair-share weight from 1 to 2.5 of team vision" in event.message
    with pytest.raises(PermissionDenied):  # how a team shares the cluster is a platform admin's
        services.team_update(actor=lead, team=team, fair_share_weight=Decimal(5))
    services.department_save(actor=admin_user, department=Department(name="Research", slug="research",
                                                                     fair_share_weight=Decimal("0.5")))
    (cohort,) = [o for o in desired.platform_objects() if o["kind"] == "Cohort"]
    assert cohort["spec"]["fairSharing"] == {"weight": "0.5"}
    assert "fair share weight 0.5" in AuditEvent.objects.get(action="department.created").message


@pytest.mark.parametrize("typed", ["-1", "100.01", "lots", "1.234", "２", ""])  # "２": ASCII digits only
def test_a_bad_weight_is_refused_on_its_field_and_nothing_is_saved(team, admin_user, typed):
    client = login(admin_user)
    page = client.post(reverse("tenants:team-edit", args=[team.slug]), team_form(slug=team.slug, fair_share_weight=typed))
    assert page.status_code == 400
    said = page.content.decode().split('data-testid="error-fair_share_weight">')[1].split("<")[0]
    assert said == (f"“{typed}” is not a weight: give a number from 0 to 100, with at most two decimals, such as 1 or 2.5."
                    if typed else "This field is required.")
    api = client.patch(f"/api/teams/{team.slug}/", {"fair_share_weight": typed or None}, content_type="application/json")
    assert api.status_code == 400 and api.json()["errors"]["fair_share_weight"] == [
        f"“{typed}” is not a weight: give a number from 0 to 100, with at most two decimals, such as 1 or 2.5."
        if typed else "This field may not be null."]
    assert Team.objects.get(pk=team.pk).fair_share_weight == 1


def test_the_api_sets_a_weight_and_shows_it(team, admin_user, lead):
    client = login(admin_user)
    set_ = client.patch(f"/api/teams/{team.slug}/", {"fair_share_weight": "3"}, content_type="application/json")
    assert set_.status_code == 200
    assert login(lead).get(f"/api/teams/{team.slug}/").json()["fair_share_weight"] == "3.00"
    refused = login(lead).patch(f"/api/teams/{team.slug}/", {"fair_share_weight": "9"}, content_type="application/json")
    assert refused.status_code == 403 and Team.objects.get(pk=team.pk).fair_share_weight == 3


def test_on_volcano_a_weight_other_than_1_is_refused_in_words(team, admin_user, settings):
    settings.PORTAL_QUEUE_BACKEND = "volcano"
    with pytest.raises(DomainError, match="Volcano, does not share idle quota by the portal's fair-share weights") as refused:
        services.team_update(actor=admin_user, team=team, fair_share_weight=Decimal(2))
    assert refused.value.field == "fair_share_weight" and Team.objects.get(pk=team.pk).fair_share_weight == 1


def borrowing(units: int, *, flavor: str = "h100-80gb") -> list[QueueUsage]:
    return [QueueUsage(flavor=flavor, resource="nvidia.com/gpu", guaranteed=0, in_use=units, borrowed=units, lent=0)]


def test_a_teams_fair_share_is_the_borrowed_units_split_by_the_borrowing_teams_weights(team, flavor, admin_user):
    heavy = TeamFactory.create(slug="heavy", name="Heavy", fair_share_weight=Decimal(3))
    idle = TeamFactory.create(slug="idle", name="Idle", fair_share_weight=Decimal(5))  # borrows nothing: not counted
    elsewhere = services.department_save(actor=admin_user, department=Department(name="Elsewhere", slug="elsewhere"))
    TeamFactory(slug="apart", name="Apart", department=elsewhere)  # another cohort's borrowing is not this one's
    queues: dict[str, list[QueueUsage]] = {team.slug: borrowing(5), heavy.slug: borrowing(3), idle.slug: [],
                                           "apart": borrowing(8)}
    (share,) = cluster_selectors.fair_shares(team=team, queues=queues)
    assert (share.flavor, share.pool, share.borrowed, share.weights, share.fair_text, share.percent, share.above) == (
        "H100 80GB", 8, 5, Decimal(4), "2", 63, True)  # 62.5 % half up, as the units are
    assert [(b.team, b.borrowed, b.weight_text) for b in share.borrowers] == [("Heavy", 3, "3")]
    (theirs,) = cluster_selectors.fair_shares(team=heavy, queues=queues)
    assert (theirs.fair_text, theirs.fair_percent, theirs.above) == ("6", 75, False)
    # Nobody borrows: no fair share to show.
    assert cluster_selectors.fair_shares(team=idle, queues={team.slug: [], heavy.slug: []}) == []


def test_the_team_page_shows_its_share_against_its_fair_share(team, flavor, member, monkeypatch):
    heavy = TeamFactory(slug="heavy", name="Heavy", fair_share_weight=Decimal(3))
    monkeypatch.setattr(cluster_selectors, "cluster_queue_usage",
                        lambda **_: {team.slug: borrowing(5), heavy.slug: borrowing(3)})
    page = login(member).get(reverse("tenants:team-cluster", args=[team.slug]), HTTP_HX_REQUEST="true")
    text = page.content.decode()
    assert 'data-testid="fair-shares"' in text and 'data-testid="above-fair"' in text
    assert "2 <span" in text and "weight 1 of 4" in text and "Heavy 3 (weight 3)" in text


def test_the_django_admin_reads_the_weight_by_the_same_rule(team, admin_user):
    """The admin's team form refuses what the pages and the API refuse (“２” is not ASCII), and saves a weight."""
    client = login(admin_user)
    data = {"name": "Vision", "cost_center": "", "description": "", "may_borrow": "on", "lends_idle": "on",
            "fair_share_weight": "２", "cpu_limit_cores": "64", "memory_limit_gib": "512", "pod_limit": "100",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}
    refused = client.post(reverse("admin:tenants_team_change", args=[team.pk]), data)
    assert refused.status_code == 200 and "“２” is not a weight" in refused.content.decode()
    assert Team.objects.get(pk=team.pk).fair_share_weight == 1
    saved = client.post(reverse("admin:tenants_team_change", args=[team.pk]), {**data, "fair_share_weight": "2.5"})
    assert saved.status_code == 302 and Team.objects.get(pk=team.pk).fair_share_weight == Decimal("2.5")
