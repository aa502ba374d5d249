"""Fairness inside a team (issue 27 §3): a lead's per-person GPU limit. A person's launch beyond it
waits in the portal, not in the cluster, while a teammate under it goes on; it goes to the cluster,
oldest first, when the person's own work ends or the limit is raised."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from django.urls import reverse

from jobs import person_limits, selectors, services, tasks
from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tenants import services as tenant_services
from tenants.models import Membership
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited(team, flavor, simulated, lead):
    """vision: 8 H100 units guaranteed, each person at most 2 GPUs at once."""
    made = make_ready(team, flavor, units=8)
    made.person_gpu_limit = Decimal("2")
    made.save(update_fields=["person_gpu_limit"])
    return made


@pytest.fixture
def teammate(team):
    user = UserFactory(username="bob")
    MembershipFactory(team=team, user=user, role=Membership.Role.MEMBER)
    return user


def in_cluster(workload: Workload) -> bool:
    return gateway().get(ObjectRef("batch/v1", "Job", workload.k8s_name, workload.team.namespace)) is not None


def test_a_person_over_the_limit_waits_in_the_portal_while_a_teammate_under_it_goes_on(
        limited, member, teammate, training, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, limited, training, flavor, units=2)
        second = launch(member, limited, training, flavor, units=1)
        theirs = launch(teammate, limited, training, flavor, units=1)
    for workload in (first, second, theirs):
        workload.refresh_from_db()

    assert first.phase == Workload.Phase.QUEUED and in_cluster(first) and not first.waits_for_person_limit
    assert second.phase == Workload.Phase.QUEUED and second.waits_for_person_limit and not in_cluster(second)
    assert second.submitted_at is None
    assert second.reason == ("Waiting in the portal for your per-person limit: Vision lets each person hold 2 GPUs at "
                             "once, and your workloads in the cluster hold 2. It goes to the cluster, oldest first, as "
                             "your own work there ends.")
    assert theirs.phase == Workload.Phase.QUEUED and in_cluster(theirs) and not theirs.waits_for_person_limit
    # Why it waits, now; and the API says so.
    assert selectors.why_waiting(workload=second).reason == second.reason
    body = api(member).get(f"/api/workloads/{second.pk}/").json()
    assert body["waits_for_person_limit"] is True and body["phase"] == "queued"


def test_her_waiting_work_goes_to_the_cluster_oldest_first_when_her_own_work_ends(
        limited, member, training, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        running = launch(member, limited, training, flavor, units=2)
        older = launch(member, limited, training, flavor, units=2)
        newer = launch(member, limited, training, flavor, units=1)
    newer.refresh_from_db()
    assert "Your earlier workloads waiting for it go first." in newer.reason  # it would fit beside nothing else

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=running)

    older.refresh_from_db()
    newer.refresh_from_db()
    assert older.phase == Workload.Phase.QUEUED and not older.waits_for_person_limit and in_cluster(older)
    assert [t.reason for t in older.transitions.order_by("at", "pk")][-2] == services.PERSON_LIMIT_RELEASED
    # 2 of 2 GPUs held again: the newer waits on, never overtaking the older.
    assert newer.waits_for_person_limit and not in_cluster(newer)


def test_a_slice_counts_its_fraction_and_a_cpu_flavor_counts_nothing(mig_flavor):
    from tests.jobs.test_cpu_flavor import cpu_flavor

    assert person_limits.gpus(flavor=mig_flavor, units=7) == 1
    assert person_limits.gpus(flavor=mig_flavor, units=3, workers=2) == Fraction(6, 7)
    assert person_limits.shown(person_limits.gpus(flavor=mig_flavor, units=3)) == "0.43"
    assert person_limits.gpus(flavor=cpu_flavor(), units=4) == 0


def test_a_launch_alone_beyond_the_limit_is_refused_on_its_units(limited, member, training, flavor):
    with pytest.raises(DomainError) as refused:
        launch(member, limited, training, flavor, units=3)
    assert refused.value.field == "units"
    assert refused.value.message == ("Vision lets each person hold at most 2 GPUs at once, and this launch asks 3, so it "
                                     "could never start. Launch fewer units, or ask a lead of vision to raise the limit.")
    assert not Workload.objects.filter(team=limited).exists()


def test_the_launch_form_says_the_launch_would_wait_for_the_limit(limited, member, training, flavor, as_user,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, limited, training, flavor, units=2)
    fragment = as_user(member).get(reverse("jobs:launch-hint"), {
        "team": "vision", "template": "pytorch-train", "flavor": flavor.slug, "units": "1", "cpu": "4", "memory_gib": "16",
        "priority": "normal", "p_epochs": "10", "p_learning_rate": "0.001", "p_image_tag": "2.5"}).content.decode()
    assert 'data-testid="hint-person-limit">Would wait in the portal for your per-person limit' in fragment


def test_a_lead_sets_the_limit_on_the_team_page_and_raising_it_sends_what_waited(
        limited, lead, member, training, flavor, as_user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, limited, training, flavor, units=2)
        waiting = launch(member, limited, training, flavor, units=2)
    client = as_user(lead)
    # The members card says what each person holds of the cap, and what of theirs waits for it.
    page = client.get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert 'data-testid="member-gpus">2 of 2 GPUs · 1 waiting for the cap<' in page
    assert 'data-testid="member-gpus">0 of 2 GPUs<' in page  # lena, the lead, runs nothing
    url = reverse("tenants:team-person-limit", args=["vision"])
    for typed, words in [("lots", "is not a number of GPUs"), ("-1", "more than 0"), ("1.234", "at most 2 decimals"),
                         ("１２", "is not a number of GPUs")]:
        page = client.post(url, {"person_gpu_limit": typed}, HTTP_HX_REQUEST="true").content.decode()
        assert words in page, typed
    limited.refresh_from_db()
    assert limited.person_gpu_limit == Decimal("2.00")
    # A member cannot change it.
    assert as_user(member).post(url, {"person_gpu_limit": "8"}).status_code == 403

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(url, {"person_gpu_limit": "4"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Each person of vision may now hold at most 4 GPUs at once." in page
    page = client.get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert 'data-testid="member-gpus">4 of 4 GPUs<' in page  # her waiting work went to the cluster
    waiting.refresh_from_db()
    assert not waiting.waits_for_person_limit and in_cluster(waiting)
    event = AuditEvent.objects.filter(action="team.updated").order_by("-pk").first()
    assert event is not None and "GPUs per person to 4.00" in event.message
    # Emptied: no limit.
    client.post(url, {"person_gpu_limit": ""}, HTTP_HX_REQUEST="true")
    limited.refresh_from_db()
    assert limited.person_gpu_limit is None


def test_a_share_of_the_guarantee_caps_each_person_and_the_smaller_of_two_caps_holds(
        limited, lead, member, training, flavor, as_user, django_capture_on_commit_callbacks):
    from tenants.selectors import person_gpu_cap

    client = as_user(lead)
    url = reverse("tenants:team-person-limit", args=["vision"])
    for typed, words in [("half", "is not a whole percent"), ("0", "from 1 to 100 %"), ("101", "from 1 to 100 %"),
                         ("12.5", "is not a whole percent")]:
        page = client.post(url, {"person_gpu_limit": "", "person_share_percent": typed}, HTTP_HX_REQUEST="true")
        assert words in page.content.decode(), typed
    limited.refresh_from_db()
    assert (limited.person_gpu_limit, limited.person_share_percent) == (Decimal("2.00"), None)  # nothing changed

    # 25 % of the 8 guaranteed GPUs is 2; with 4 GPUs per person too, the smaller (2) holds.
    page = client.post(url, {"person_gpu_limit": "4", "person_share_percent": "25 %"}, HTTP_HX_REQUEST="true")
    assert "Each person of vision may now hold at most 2 GPUs (25 % of its 8 guaranteed) at once." in page.content.decode()
    limited.refresh_from_db()
    cap = person_gpu_cap(team=limited)
    assert cap is not None and cap.gpus == 2
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, limited, training, flavor, units=2)
        waiting = launch(member, limited, training, flavor, units=1)
    waiting.refresh_from_db()
    assert waiting.waits_for_person_limit
    assert "Vision lets each person hold 2 GPUs (25 % of its 8 guaranteed) at once" in waiting.reason
    # Only the share: 50 % of 8 is 4, and what waited goes.
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url, {"person_gpu_limit": "", "person_share_percent": "50"}, HTTP_HX_REQUEST="true")
    waiting.refresh_from_db()
    assert not waiting.waits_for_person_limit and in_cluster(waiting)
    event = AuditEvent.objects.filter(action="team.updated").order_by("-pk").first()
    assert event is not None and "the share of the guarantee per person to 50 %" in event.message


def test_the_periodic_pass_sends_what_a_lost_release_left_waiting(limited, member, training, flavor,
                                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        running = launch(member, limited, training, flavor, units=2)
        waiting = launch(member, limited, training, flavor, units=1)
    # The release her stop sends is lost (the broker was away): nothing but the pass sends it.
    with django_capture_on_commit_callbacks(execute=False):
        services.workload_stop(user=member, workload=running)
    waiting.refresh_from_db()
    assert waiting.waits_for_person_limit

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.person_limits_release_all() == 1
    waiting.refresh_from_db()
    assert not waiting.waits_for_person_limit and in_cluster(waiting)
    assert tasks.person_limits_release_all() == 0  # nothing waits: one read, nothing sent


def test_stopping_work_that_waits_in_the_portal_stops_it_and_frees_nothing(
        limited, member, training, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, limited, training, flavor, units=2)
        waiting = launch(member, limited, training, flavor, units=1)
        stopped = services.workload_stop(user=member, workload=waiting)
    assert stopped.phase == Workload.Phase.STOPPED and not in_cluster(stopped)
    assert not Workload.objects.get(pk=stopped.pk).waits_for_person_limit  # it waits no more
    assert person_limits.in_cluster(team=limited, owner=member) == 2


def test_the_api_lets_a_lead_set_the_limit_and_shows_it(limited, lead, member):
    response = api(lead).patch("/api/teams/vision/", {"person_gpu_limit": "1.5"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["person_gpu_limit"] == "1.50"
    refused = api(lead).patch("/api/teams/vision/", {"person_gpu_limit": "0"}, format="json")
    assert refused.status_code == 400 and "more than 0" in refused.json()["message"]
    assert api(member).patch("/api/teams/vision/", {"person_gpu_limit": "9"}, format="json").status_code == 403
    shared = api(lead).patch("/api/teams/vision/", {"person_share_percent": "25"}, format="json")
    assert shared.status_code == 200 and shared.json()["person_share_percent"] == 25
    assert api(lead).patch("/api/teams/vision/", {"person_share_percent": "250"}, format="json").status_code == 400
    with pytest.raises(DomainError):
        tenant_services.team_update(actor=lead, team=limited, person_gpu_limit="x")


def test_a_server_grows_only_within_its_owners_limit_and_one_waiting_in_the_portal_stays_out_of_the_cluster(
        limited, member, admin_user, flavor, django_capture_on_commit_callbacks):
    from jobs.models import WorkloadKind

    inference = services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm-openai:v0.6.3",
        port=8000, parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}])
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, limited, inference, flavor, units=1, name="first")
        second = launch(member, limited, inference, flavor, units=1, name="second")
        third = launch(member, limited, inference, flavor, units=1, name="third")
    third.refresh_from_db()
    assert third.waits_for_person_limit  # 2 of her 2 GPUs are held by the first two

    with pytest.raises(DomainError, match="3 replicas ask 3, so it could never start") as too_big:
        services.workload_scale(user=member, workload=first, replicas=3)
    with pytest.raises(DomainError, match="2 replicas would hold 2 GPUs, and your other workloads in the cluster hold 1;"
                                          " Vision lets each person hold 2 GPUs at once") as over:
        services.workload_scale(user=member, workload=first, replicas=2)
    assert too_big.value.field == over.value.field == "replicas"
    # The one waiting in the portal may change what it will ask for; nothing of it reaches the cluster.
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_scale(user=member, workload=third, replicas=2)
    assert gateway().get(ObjectRef("apps/v1", "Deployment", third.k8s_name, "vision")) is None

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=second)  # 1 + 2 would be 3: it waits on
    third.refresh_from_db()
    assert third.waits_for_person_limit
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=first)
    deployment = gateway().get(ObjectRef("apps/v1", "Deployment", third.k8s_name, "vision"))
    assert deployment is not None and deployment["spec"]["replicas"] == 2
