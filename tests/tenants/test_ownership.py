"""The portal touches only what it created for a team: the rule on the simulated cluster, where
API calls can be counted. The same scenarios on the real control plane are in
tests/contract/test_tenancy_contract.py."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from portal.kube import KubeError, ObjectRef, reset_gateway
from portal.kube.counting import CountingGateway
from tenants import cluster_selectors, desired, manifests, reconcile, services, tasks
from tenants.models import Team
from tenants.queueing.kueue import KUEUE
from tests.factories import TeamFactory
from tests.helpers import api, make_ready

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
REFUSAL = ("The namespace vision already exists in the cluster and was not created by the portal for this team, "
           "so the portal will not adopt it. Remove it, or set PORTAL_NAMESPACE_PREFIX.")
NAMESPACE = ObjectRef("v1", "Namespace", "vision")
QUEUE = ObjectRef(KUEUE, "ClusterQueue", "vision")


def someone_elses_namespace(cluster, name: str = "vision", labels: dict | None = None, annotations: dict | None = None) -> None:
    metadata: dict = {"name": name, "labels": labels or {"owner": "observability"}}
    if annotations:
        metadata["annotations"] = annotations
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}, field_manager="someone-by-hand")


def test_a_refused_team_says_why_on_the_team_page_and_in_the_cluster_api(team, member, simulated, as_user):
    someone_elses_namespace(simulated)

    assert reconcile.team_reconcile(team_id=team.pk) is False

    fragment = as_user(member).get(reverse("tenants:team-cluster", args=["vision"]), **HTMX).content.decode()
    assert 'data-testid="sync-state">Error<' in fragment
    assert REFUSAL in fragment
    picture = api(member).get("/api/teams/vision/cluster/").json()
    assert (picture["state"], picture["error"]) == ("error", REFUSAL)


def test_the_team_api_shows_the_uid_its_objects_carry(team, member, simulated):
    assert api(member).get("/api/teams/vision/").json()["uid"] == str(team.uid)


def test_a_refusal_applies_nothing_and_the_task_does_not_retry_it(team, simulated):
    someone_elses_namespace(simulated)
    before = simulated.get(NAMESPACE)
    counting = CountingGateway(simulated)
    reset_gateway(counting)  # the simulated fixture drops it again afterwards

    assert tasks.team_reconcile.delay(team.pk).get() is False

    assert counting.total == 1  # one read of the namespace, no write
    assert simulated.get(NAMESPACE) == before
    assert simulated.get(QUEUE) is None


def test_a_refusal_is_a_kube_error_that_no_retry_policy_retries():
    refusal = reconcile.NotOwned(NAMESPACE)
    assert isinstance(refusal, KubeError)
    assert (refusal.status, refusal.reason, refusal.retriable) == (409, "NotOwnedByTeam", False)
    assert str(refusal) == REFUSAL


def test_the_periodic_pass_reads_directly_only_the_teams_it_did_not_find_by_label(team, other_team, flavor, simulated):
    make_ready(team, flavor)
    make_ready(other_team, flavor)
    counting = CountingGateway(simulated)
    reset_gateway(counting)  # the simulated fixture drops it again afterwards
    reconcile.cluster_reconcile()
    assert counting.total == len(reconcile.owned_kinds())  # one list per kind and not a single get

    TeamFactory(slug="recsys", name="Recsys")
    calls = counting.total
    result = reconcile.cluster_reconcile()
    assert counting.total - calls == len(reconcile.owned_kinds()) + 2 + 10  # its namespace and queue read, its 10 objects applied
    assert len(result.applied) == 10 and not result.errors


def test_the_periodic_pass_refuses_a_team_whose_root_carries_another_teams_uid(team, other_team, flavor, simulated):
    make_ready(other_team, flavor)
    someone_elses_namespace(simulated, labels={manifests.MANAGED_BY_LABEL: manifests.MANAGER, manifests.TEAM_LABEL: "vision"},
                            annotations={manifests.TEAM_UID_ANNOTATION: str(other_team.uid)})

    result = reconcile.cluster_reconcile()

    team.refresh_from_db()
    assert result.errors == {"vision": REFUSAL} and team.sync_error == REFUSAL
    assert not [ref for ref in result.applied if "vision" in ref]
    assert simulated.get(QUEUE) is None
    # By its proof the namespace is speech's, and speech does not want it (as after a change of
    # PORTAL_NAMESPACE_PREFIX): the pass prunes it, and vision is provisioned on the next pass.
    assert result.deleted == ["Namespace vision"]
    assert not reconcile.cluster_reconcile().errors
    assert simulated.get(NAMESPACE)["metadata"]["annotations"] == {manifests.TEAM_UID_ANNOTATION: str(team.uid)}


def test_the_prune_leaves_objects_with_the_portals_label_but_no_uid(simulated):
    someone_elses_namespace(simulated, name="copied", labels={manifests.MANAGED_BY_LABEL: manifests.MANAGER,
                                                              manifests.TEAM_LABEL: "copied"})

    result = reconcile.cluster_reconcile()

    assert result.deleted == []
    assert simulated.get(ObjectRef("v1", "Namespace", "copied")) is not None


def test_teardown_deletes_nothing_that_carries_another_teams_uid(team, flavor, simulated):
    make_ready(team, flavor)

    assert reconcile.team_teardown(slug="vision", uid="a-team-deleted-long-ago") is True
    assert reconcile.team_teardown(slug="vision", uid="") is True
    assert simulated.get(NAMESPACE) is not None and simulated.get(QUEUE) is not None

    assert reconcile.team_teardown(slug="vision", uid=str(team.uid)) is True
    assert simulated.get(NAMESPACE) is None and simulated.get(QUEUE) is None


def test_a_team_from_before_the_uid_adopts_its_labelled_objects_once(team, flavor, simulated):
    _, spec = desired.team_specs([team.pk])[team.pk]
    for obj in desired.team_objects(spec):
        del obj["metadata"]["annotations"]  # as the portal wrote them before teams had a uid
        simulated.apply(obj)

    assert reconcile.team_reconcile(team_id=team.pk) is False  # a new team never adopts them
    Team.objects.filter(pk=team.pk).update(adopts_unannotated=True, sync_error="")  # what the migration sets

    assert reconcile.team_reconcile(team_id=team.pk) is True
    team.refresh_from_db()
    assert not team.adopts_unannotated and team.sync_state == "in_sync"
    assert simulated.get(NAMESPACE)["metadata"]["annotations"] == {manifests.TEAM_UID_ANNOTATION: str(team.uid)}


def test_every_team_gets_its_own_uid_that_outlives_nothing(db):
    first = TeamFactory.create(slug="vision")
    uid = first.uid
    first.delete()
    again = TeamFactory.create(slug="vision")
    assert again.uid != uid and again.uid != TeamFactory.create(slug="speech").uid


def test_the_namespace_prefix_names_the_teams_namespace_and_queue_everywhere(team, flavor, simulated, settings):
    settings.PORTAL_NAMESPACE_PREFIX = "gpu-"
    make_ready(team, flavor, units=3)

    assert (team.namespace, team.cluster_queue) == ("gpu-vision", "gpu-vision")
    assert simulated.get(ObjectRef("v1", "Namespace", "gpu-vision")) is not None
    assert simulated.get(ObjectRef("v1", "ResourceQuota", "gpu-portal", "gpu-vision")) is not None
    assert simulated.get(ObjectRef(KUEUE, "ClusterQueue", "gpu-vision")) is not None
    assert simulated.get(NAMESPACE) is None
    assert [row.guaranteed for row in cluster_selectors.team_cluster_picture(team=team).usage] == [3]

    assert reconcile.team_teardown(slug="vision", uid=str(team.uid)) is True
    assert simulated.get(ObjectRef("v1", "Namespace", "gpu-vision")) is None


def test_the_prefix_leaves_room_for_the_slug_in_a_namespace_name(admin_user, settings):
    settings.PORTAL_NAMESPACE_PREFIX = "gpu-portal-"
    with pytest.raises(ValidationError, match="longer than 63 characters"):
        services.team_create(actor=admin_user, slug="a" * 60, name="Long")


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_each_existing_team_its_own_uid_and_lets_it_adopt_its_old_objects():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("tenants", "0002_cluster_sync_and_policy")])
    old_state = executor.loader.project_state([("tenants", "0002_cluster_sync_and_policy")]).apps
    OldTeam = old_state.get_model("tenants", "Team")
    for slug in ("vision", "speech", "nlp"):
        OldTeam.objects.create(slug=slug, name=slug)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    teams = list(Team.objects.all())
    assert len({team.uid for team in teams}) == 3
    assert all(team.adopts_unannotated for team in teams)
    assert not TeamFactory.create(slug="recsys").adopts_unannotated
