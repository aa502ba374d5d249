"""A team's RoleBinding names its active SSO members only, by the subject the API server knows
them by, and follows an account's activation; local accounts have no cluster identity."""

from __future__ import annotations

from typing import Any

import pytest

from portal.kube import ObjectRef, gateway
from portal.models import SsoIdentity, User
from tenants.models import Membership, Team
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _role_binding(team: Team) -> dict[str, Any] | None:
    return gateway().get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-members", team.namespace))


ISSUER = "https://id.example.org"
ALICE, LENA = "24a8e0d2-alice", "7c51f9aa-lena"


def _subject(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"oidc:{name}"}


def _bound_names(team: Team) -> list[str]:
    from tenants import reconcile

    reconcile.team_reconcile(team_id=team.pk)
    binding = _role_binding(team)
    assert binding is not None
    return [subject["name"] for subject in binding["subjects"]]


@pytest.fixture
def bound_team(ready_team: Team, lead: User, member: User, django_capture_on_commit_callbacks: Any) -> Team:
    SsoIdentity.objects.create(user=member, issuer=ISSUER, subject=ALICE)
    SsoIdentity.objects.create(user=lead, issuer=ISSUER, subject=LENA)
    assert _bound_names(ready_team) == [f"oidc:{ALICE}", f"oidc:{LENA}"]
    return ready_team


def test_sso_members_are_bound_by_subject_so_a_username_names_no_one_in_the_cluster(bound_team, member):
    # A portal username can change (and be chosen by whoever signs up first): the binding does not follow it.
    member.username = "lena-admin"
    member.save()
    assert _bound_names(bound_team) == [f"oidc:{ALICE}", f"oidc:{LENA}"]


def test_local_accounts_are_left_out_of_the_role_binding(bound_team):
    local = UserFactory.create(username="bob")
    MembershipFactory(team=bound_team, user=local, role=Membership.Role.LEAD)
    assert local.has_usable_password() and not SsoIdentity.objects.filter(user=local).exists()
    assert _bound_names(bound_team) == [f"oidc:{ALICE}", f"oidc:{LENA}"]


def test_the_claim_prefix_and_issuer_follow_the_api_server_settings(bound_team, member, lead, settings):
    member.email, lead.email = "alice@example.org", ""
    member.save()
    lead.save()
    settings.KUBE_OIDC_USERNAME_CLAIM, settings.KUBE_OIDC_USERNAME_PREFIX = "email", ""
    # lena has no address: the API server could not name her by one, so she is not bound at all.
    assert _bound_names(bound_team) == ["alice@example.org"]
    settings.KUBE_OIDC_USERNAME_CLAIM, settings.KUBE_OIDC_USERNAME_PREFIX = "sub", "corp#"
    assert _bound_names(bound_team) == [f"corp#{ALICE}", f"corp#{LENA}"]
    SsoIdentity.objects.filter(user=lead).update(issuer="https://old-provider.example.org")
    settings.KUBE_OIDC_ISSUER = ISSUER
    # A subject of another issuer may be someone else's at the one the API server trusts.
    assert _bound_names(bound_team) == [f"corp#{ALICE}"]


def test_deactivating_a_member_drops_them_from_the_team_role_binding(bound_team, member, django_capture_on_commit_callbacks):
    member.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        member.save()
    binding = _role_binding(bound_team)
    assert binding is not None
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    assert binding["subjects"] == [_subject(LENA)]
    assert Membership.objects.filter(user=member, team=bound_team).exists()


def test_reactivating_a_member_binds_them_again(bound_team, member, django_capture_on_commit_callbacks):
    member.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        member.save()
    member.is_active = True
    with django_capture_on_commit_callbacks(execute=True):
        member.save(update_fields=["is_active"])
    binding = _role_binding(bound_team)
    assert binding is not None
    assert binding["subjects"] == [_subject(ALICE), _subject(LENA)]


def test_deactivating_a_user_reconciles_every_team_they_belong_to_and_no_other(
        bound_team, member, django_capture_on_commit_callbacks):
    other = TeamFactory.create(slug="speech", name="Speech")
    unrelated = TeamFactory.create(slug="audio", name="Audio")
    MembershipFactory(team=other, user=member, role=Membership.Role.MEMBER)
    versions = {t.pk: t.config_version for t in Team.objects.all()}
    member.is_active = False
    with django_capture_on_commit_callbacks() as callbacks:
        member.save()
    assert len(callbacks) == 2
    after = {t.pk: t.config_version for t in Team.objects.all()}
    assert after[bound_team.pk] == versions[bound_team.pk] + 1
    assert after[other.pk] == versions[other.pk] + 1
    assert after[unrelated.pk] == versions[unrelated.pk]


def test_a_login_that_saves_only_last_login_reconciles_nothing(bound_team, member, django_capture_on_commit_callbacks,
                                                              django_assert_num_queries):
    from django.contrib.auth.models import update_last_login

    with django_capture_on_commit_callbacks() as callbacks, django_assert_num_queries(1):
        update_last_login(User, member)
    assert callbacks == []


def test_a_new_inactive_user_reconciles_nothing(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        UserFactory(username="nobody", is_active=False)
    assert callbacks == []


def test_changing_the_member_role_recreates_each_binding_in_the_periodic_pass(bound_team, settings):
    from portal.kube import reset_gateway
    from portal.kube.counting import CountingGateway
    from tenants import reconcile

    settings.PORTAL_MEMBER_CLUSTER_ROLE = "portal-gpu-portal-member"
    counting = CountingGateway(gateway())
    reset_gateway(counting)
    # A RoleBinding's roleRef cannot change in place: the pass deletes it and applies it again.
    result = reconcile.cluster_reconcile()
    assert result.errors == {}
    binding = _role_binding(bound_team)
    assert binding is not None
    assert binding["roleRef"]["name"] == "portal-gpu-portal-member"
    assert binding["subjects"] == [_subject(ALICE), _subject(LENA)]
    assert f"RoleBinding {bound_team.namespace}/gpu-portal-members" in result.applied
    assert counting.kinds[("delete", "RoleBinding")] == 1
    reset_gateway(None)
