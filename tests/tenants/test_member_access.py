"""A team's RoleBinding names its active members only, and follows an account's activation."""

from __future__ import annotations

from typing import Any

import pytest

from portal.kube import ObjectRef, gateway
from portal.models import User
from tenants.models import Membership, Team
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _role_binding(team: Team) -> dict[str, Any] | None:
    return gateway().get(ObjectRef("rbac.authorization.k8s.io/v1", "RoleBinding", "gpu-portal-members", team.namespace))


def _subject(username: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"oidc:{username}"}


@pytest.fixture
def bound_team(ready_team: Team, lead: User, member: User, django_capture_on_commit_callbacks: Any) -> Team:
    from tenants import reconcile

    reconcile.team_reconcile(team_id=ready_team.pk)
    binding = _role_binding(ready_team)
    assert binding is not None
    assert binding["subjects"] == [_subject("alice"), _subject("lena")]
    return ready_team


def test_deactivating_a_member_drops_them_from_the_team_role_binding(bound_team, member, django_capture_on_commit_callbacks):
    member.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        member.save()
    binding = _role_binding(bound_team)
    assert binding is not None
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    assert binding["subjects"] == [_subject("lena")]
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
    assert binding["subjects"] == [_subject("alice"), _subject("lena")]


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
