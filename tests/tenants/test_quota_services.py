"""The quota lifecycle in services: every transition and every refusal."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from portal.errors import DomainError, StateConflict
from portal.models import AuditEvent, Notification
from tenants import selectors, services
from tenants.models import Membership, QuotaGrant, QuotaRequest
from tests.factories import (
    MembershipFactory,
    QuotaGrantFactory,
    TeamFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def request_units(team, requester, flavor, units, ends_on=None, justification="Fine-tuning the detector"):
    return services.quota_request_create(
        requester=requester,
        team=team,
        lines=[services.LineInput(flavor=flavor, units=units)],
        justification=justification,
        ends_on=ends_on,
    )


def test_a_member_requests_quota_and_the_leads_are_notified(team, member, lead, flavor):
    qr = request_units(team, member, flavor, 4)

    assert qr.status == QuotaRequest.Status.PENDING
    assert [(line.flavor, line.units) for line in qr.lines.all()] == [(flavor, 4)]
    event = AuditEvent.objects.get(action="quota_request.created")
    assert event.message == f"alice requested +4 H100 80GB for vision (request #{qr.pk})"
    assert event.team_id == team.pk
    assert Notification.objects.get(recipient=lead).message.startswith("alice asks for +4 H100 80GB")


def test_leads_get_the_new_request_by_email_after_commit(team, member, lead, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        request_units(team, member, flavor, 4)

    assert [m.to for m in mail.outbox] == [[lead.email]]
    assert "alice asks for +4 H100 80GB" in mail.outbox[0].body


def test_an_outsider_cannot_request_quota_for_another_team(team, outsider, flavor):
    with pytest.raises(PermissionDenied):
        request_units(team, outsider, flavor, 4)
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize(
    ("units", "message"),
    [
        (0, "other than 0"),
        (17, "at most 16 more can ever be granted"),
        (-1, "can give back at most 0"),
    ],
)
def test_requests_with_impossible_units_are_refused_with_the_reason(team, member, flavor, units, message):
    with pytest.raises(DomainError, match=message):
        request_units(team, member, flavor, units)
    assert not QuotaRequest.objects.exists()


def test_a_request_without_justification_or_lines_is_refused(team, member, flavor):
    with pytest.raises(DomainError, match="Say why"):
        request_units(team, member, flavor, 4, justification="  ")
    with pytest.raises(DomainError, match="at least one flavor"):
        services.quota_request_create(requester=member, team=team, lines=[], justification="x")


def test_the_same_flavor_twice_is_refused(team, member, flavor):
    lines = [services.LineInput(flavor=flavor, units=1), services.LineInput(flavor=flavor, units=2)]
    with pytest.raises(DomainError, match="appears twice"):
        services.quota_request_create(requester=member, team=team, lines=lines, justification="x")


def test_an_end_date_must_be_in_the_future_and_cannot_lower_quota(team, member, flavor):
    with pytest.raises(DomainError, match="after today"):
        request_units(team, member, flavor, 4, ends_on=timezone.localdate())
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    with pytest.raises(DomainError, match="lowered permanently"):
        request_units(team, member, flavor, -2, ends_on=timezone.localdate() + dt.timedelta(days=3))


def test_a_retired_flavor_cannot_be_requested(team, member, flavor):
    flavor.is_active = False
    flavor.save()
    with pytest.raises(DomainError, match="retired"):
        request_units(team, member, flavor, 1)


def test_the_lead_approves_and_the_team_is_guaranteed_the_units(team, member, lead, flavor):
    qr = request_units(team, member, flavor, 8, ends_on=dt.date(2099, 12, 31))

    services.quota_request_approve(quota_request=qr, approver=lead, note="go")

    qr.refresh_from_db()
    assert (qr.status, qr.decided_by, qr.decision_note) == (QuotaRequest.Status.APPROVED, lead, "go")
    assert selectors.team_guarantees(team=team) == {flavor.pk: 8}
    grant = QuotaGrant.objects.get()
    assert timezone.localtime(grant.valid_until).date() == dt.date(2100, 1, 1)
    assert AuditEvent.objects.get(action="quota_request.approved").message == (
        f"lena approved request #{qr.pk}: +8 H100 80GB for vision through 2099-12-31"
    )
    assert "lena approved your request" in Notification.objects.get(recipient=member).message


def test_approval_queues_the_team_reconcile_after_commit(team, member, lead, flavor, django_capture_on_commit_callbacks):
    qr = request_units(team, member, flavor, 2)
    with django_capture_on_commit_callbacks() as callbacks:
        services.quota_request_approve(quota_request=qr, approver=lead)
    assert len(callbacks) >= 1


def test_a_member_cannot_approve_even_their_own_request(team, member, flavor):
    qr = request_units(team, member, flavor, 2)
    with pytest.raises(PermissionDenied):
        services.quota_request_approve(quota_request=qr, approver=member)
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING


def test_a_lead_of_another_team_cannot_decide(team, member, outsider, flavor):
    qr = request_units(team, member, flavor, 2)
    with pytest.raises(PermissionDenied):
        services.quota_request_reject(quota_request=qr, approver=outsider)


def test_approval_is_refused_with_the_numbers_when_capacity_would_be_overcommitted(team, other_team, member, lead, flavor):
    QuotaGrantFactory(team=other_team, flavor=flavor, units=10)
    qr = request_units(team, member, flavor, 8)

    with pytest.raises(DomainError) as refused:
        services.quota_request_approve(quota_request=qr, approver=lead)

    assert str(refused.value) == (
        f"Cannot approve request #{qr.pk}: H100 80GB has 16 units and teams already hold 10; "
        "+8 would make 18, so at most 6 more can be approved."
    )
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING
    assert not QuotaGrant.objects.filter(team=team).exists()


def test_a_platform_admin_may_approve_for_any_team_but_not_beyond_capacity(team, other_team, member, admin_user, flavor):
    qr = request_units(team, member, flavor, 6)
    services.quota_request_approve(quota_request=qr, approver=admin_user)
    assert selectors.team_guarantees(team=team) == {flavor.pk: 6}

    QuotaGrantFactory(team=other_team, flavor=flavor, units=10)
    second = request_units(team, member, flavor, 1)
    with pytest.raises(DomainError, match="at most 0 more"):
        services.quota_request_approve(quota_request=second, approver=admin_user)


def test_lowering_quota_gives_units_back(team, member, lead, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=6)
    qr = request_units(team, member, flavor, -4)
    services.quota_request_approve(quota_request=qr, approver=lead)
    assert selectors.team_guarantees(team=team) == {flavor.pk: 2}


def test_lowering_below_zero_is_refused_at_approval_when_quota_shrank_meanwhile(team, member, lead, flavor):
    grant = QuotaGrantFactory.create(team=team, flavor=flavor, units=4)
    qr = request_units(team, member, flavor, -4)
    grant.ended_at = timezone.now()
    grant.save()
    with pytest.raises(DomainError, match="would go below zero"):
        services.quota_request_approve(quota_request=qr, approver=lead)


def test_a_request_can_be_decided_only_once(team, member, lead, flavor):
    qr = request_units(team, member, flavor, 2)
    services.quota_request_reject(quota_request=qr, approver=lead, note="not this quarter")
    assert AuditEvent.objects.get(action="quota_request.rejected").message == (
        f"lena rejected request #{qr.pk} for vision: not this quarter"
    )
    with pytest.raises(StateConflict, match="is rejected; only a pending request can be approved"):
        services.quota_request_approve(quota_request=qr, approver=lead)
    with pytest.raises(StateConflict):
        services.quota_request_cancel(quota_request=qr, actor=member)


def test_the_requester_cancels_a_pending_request_but_nobody_else_may(team, member, lead, flavor):
    qr = request_units(team, member, flavor, 2)
    with pytest.raises(PermissionDenied):
        services.quota_request_cancel(quota_request=qr, actor=lead)
    services.quota_request_cancel(quota_request=qr, actor=member)
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.CANCELLED
    assert AuditEvent.objects.filter(action="quota_request.cancelled").exists()


def test_a_temporary_grant_warns_three_days_ahead_then_expires_once(team, member, lead, flavor):
    last_day = timezone.localdate() + dt.timedelta(days=30)
    qr = request_units(team, member, flavor, 8, ends_on=last_day)
    services.quota_request_approve(quota_request=qr, approver=lead)
    grant = QuotaGrant.objects.get()
    assert grant.valid_until is not None and timezone.localtime(grant.valid_until).date() == last_day + dt.timedelta(days=1)
    assert services.quota_grants_expire() == services.ExpiryResult(ended=0, warned=0)

    three_days_before = grant.valid_until - dt.timedelta(days=2, hours=12)
    assert services.quota_grants_expire(now=three_days_before) == services.ExpiryResult(ended=0, warned=1)
    assert services.quota_grants_expire(now=three_days_before) == services.ExpiryResult(ended=0, warned=0)
    warning = Notification.objects.filter(recipient=member).first()
    assert warning is not None and f"ends after {last_day.isoformat()}" in warning.message
    assert QuotaGrant.objects.active(at=three_days_before).count() == 1

    just_after = grant.valid_until + dt.timedelta(seconds=30)
    assert not QuotaGrant.objects.active(at=just_after).exists()
    assert services.quota_grants_expire(now=just_after) == services.ExpiryResult(ended=1, warned=0)
    assert services.quota_grants_expire(now=just_after) == services.ExpiryResult(ended=0, warned=0)

    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.EXPIRED
    assert AuditEvent.objects.get(action="quota_grant.ended").message == (
        f"Temporary grant of +8 H100 80GB for vision ended (request #{qr.pk})"
    )
    assert Notification.objects.filter(recipient=lead, message__contains="has ended").count() == 1


def test_guarantees_sum_active_grants_only(team, flavor, mig_flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    QuotaGrantFactory(team=team, flavor=flavor, units=2, valid_until=timezone.now() + dt.timedelta(days=1))
    QuotaGrantFactory(team=team, flavor=flavor, units=100, valid_until=timezone.now() - dt.timedelta(seconds=1))
    QuotaGrantFactory(team=team, flavor=mig_flavor, units=14, ended_at=timezone.now())
    assert selectors.team_guarantees(team=team) == {flavor.pk: 6}
    assert selectors.team_guarantees(team=team, permanent_only=True) == {flavor.pk: 4}


def test_flavor_capacity_cannot_drop_below_what_teams_are_guaranteed(team, admin_user, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=12)
    flavor.capacity_units = 8
    with pytest.raises(DomainError, match="guaranteed 12 units"):
        services.flavor_save(actor=admin_user, flavor=flavor)


def test_only_platform_admins_edit_flavors(lead, flavor):
    with pytest.raises(PermissionDenied):
        services.flavor_save(actor=lead, flavor=flavor)


def test_team_slugs_follow_kubernetes_naming_and_say_so(admin_user):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="DNS-1123"):
        services.team_create(actor=admin_user, slug="Vision_Team", name="Vision")
    with pytest.raises(ValidationError, match="reserved"):
        services.team_create(actor=admin_user, slug="kube-system", name="Nope")
    team = services.team_create(actor=admin_user, slug="nlp", name="Language")
    assert AuditEvent.objects.get(action="team.created").message == "root created team nlp (Language)"
    assert team.namespace == "nlp"


def test_leads_manage_members_but_the_last_lead_stays(team, lead, member):
    newcomer = UserFactory.create(username="nina")
    membership = services.membership_add(actor=lead, team=team, user=newcomer)
    services.membership_set_role(actor=lead, membership=membership, role=Membership.Role.LEAD)
    services.membership_remove(actor=newcomer, membership=Membership.objects.get(user=lead))
    with pytest.raises(DomainError, match="only lead"):
        services.membership_set_role(actor=newcomer, membership=Membership.objects.get(user=newcomer), role="member")
    with pytest.raises(PermissionDenied):
        services.membership_add(actor=member, team=team, user=UserFactory.create(username="mallory"))


def test_adding_someone_twice_is_refused(team, lead, member):
    with pytest.raises(DomainError, match="already in vision"):
        services.membership_add(actor=lead, team=team, user=member)


def test_single_sign_on_groups_become_memberships(team, other_team, settings):
    user = UserFactory.create(username="sam")
    MembershipFactory(team=other_team, user=user)
    TeamFactory(slug="nlp")

    services.memberships_sync_from_groups(user=user, groups=["team-vision-leads", "team-nlp", "team-unknown", "staff"])

    roles = dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))
    assert roles == {"vision": "lead", "nlp": "member"}


def test_only_a_platform_admin_changes_how_a_team_shares_the_cluster(team, lead, admin_user):
    with pytest.raises(PermissionDenied):
        services.team_update(actor=lead, team=team, may_borrow=False)
    services.team_update(actor=lead, team=team, description="Detection models")
    services.team_update(actor=admin_user, team=team, may_borrow=False, pod_limit=50)
    team.refresh_from_db()
    assert (team.description, team.may_borrow, team.pod_limit) == ("Detection models", False, 50)
    event = AuditEvent.objects.filter(action="team.updated").first()
    assert event is not None and event.message == "root changed may_borrow to False, pod_limit to 50 of team vision"


def test_a_flavor_keeps_its_slug_because_it_names_the_resource_flavor(admin_user, flavor):
    flavor.slug = "renamed"
    with pytest.raises(DomainError, match="cannot change"):
        services.flavor_save(actor=admin_user, flavor=flavor)
