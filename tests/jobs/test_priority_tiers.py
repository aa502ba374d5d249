"""Who may launch at which priority tier (issue 8, finding 3): members at the tiers the template
offers them (low and normal unless it says otherwise), the team's leads and platform admins at
any; the service refuses the rest with a sentence naming the tiers allowed, on every path in:
the form, the API, relaunch and a submission sent again."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import rules, services, tasks
from jobs.models import Priority, Workload, WorkloadKind
from portal.errors import DomainError
from tenants.models import Membership, forget_team_roles
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import TRAINING_PARAMS, api, launch

pytestmark = pytest.mark.django_db

MEMBER_REFUSAL = ("You may launch PyTorch training in vision at low or normal priority, not high. High priority is for "
                  "the team's leads and platform admins, unless the template offers it to members.")


def test_a_member_may_not_launch_at_high_and_the_refusal_names_the_allowed_tiers(ready_team, member, training, flavor):
    with pytest.raises(DomainError) as refused:
        launch(member, ready_team, training, flavor, priority=Priority.HIGH)

    assert refused.value.message == MEMBER_REFUSAL and refused.value.field == "priority"
    assert not Workload.objects.exists()


@pytest.mark.parametrize("tier", [Priority.LOW, Priority.NORMAL])
def test_a_member_launches_at_the_tiers_the_template_offers(ready_team, member, training, flavor, tier):
    assert launch(member, ready_team, training, flavor, priority=tier).priority == tier


def test_the_teams_lead_and_a_platform_admin_may_launch_at_high(ready_team, lead, admin_user, training, flavor):
    assert launch(lead, ready_team, training, flavor, priority=Priority.HIGH).priority == Priority.HIGH
    assert launch(admin_user, ready_team, training, flavor, priority=Priority.HIGH).priority == Priority.HIGH


def test_leading_another_team_gives_no_high_priority_in_this_one(ready_team, outsider, training, flavor):
    MembershipFactory(team=ready_team, user=outsider, role=Membership.Role.MEMBER)  # lead of speech, member of vision

    with pytest.raises(DomainError, match="at low or normal priority, not high"):
        launch(outsider, ready_team, training, flavor, priority=Priority.HIGH)


def test_a_template_that_offers_high_lets_members_use_it(ready_team, member, admin_user, flavor):
    serving = services.template_create(
        user=admin_user, slug="serve", name="Serve", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm:1",
        port=8000, default_priority=Priority.HIGH, allowed_priorities=[Priority.NORMAL, Priority.HIGH],
        parameters=[{"name": "replicas", "type": "int", "default": 1, "min": 1, "max": 2}],
    )

    assert launch(member, ready_team, serving, flavor).priority == Priority.HIGH  # its default
    with pytest.raises(DomainError, match="at normal or high priority, not low"):
        launch(member, ready_team, serving, flavor, priority=Priority.LOW)


def test_the_api_refuses_a_members_high_priority_with_a_400_and_the_sentence(ready_team, member, training):
    response = api(member).post("/api/workloads/", {
        "team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "priority": "high"}, format="json")

    assert response.status_code == 400
    assert response.json()["message"] == MEMBER_REFUSAL
    assert not Workload.objects.exists()


def test_a_relaunch_is_held_to_the_rule_of_today_not_of_the_first_launch(ready_team, lead, training, flavor):
    urgent = launch(lead, ready_team, training, flavor, priority=Priority.HIGH)
    Membership.objects.filter(team=ready_team, user=lead).update(role=Membership.Role.MEMBER)
    forget_team_roles(lead)  # read once per request: this is the next one

    with pytest.raises(DomainError, match="at low or normal priority, not high"):
        services.workload_relaunch(user=lead, workload=urgent)
    response = api(lead).post(f"/api/workloads/{urgent.pk}/relaunch/")
    assert response.status_code == 400 and "not high" in response.json()["message"]
    assert Workload.objects.count() == 1


def test_a_submission_sent_again_after_the_owner_lost_the_role_fails_with_the_reason(
        ready_team, lead, training, flavor, monkeypatch):
    monkeypatch.setattr(tasks.workload_submit, "apply_async", lambda args, **kwargs: None)  # the first submission is lost
    urgent = launch(lead, ready_team, training, flavor, priority=Priority.HIGH)
    Membership.objects.filter(team=ready_team, user=lead).update(role=Membership.Role.MEMBER)

    assert tasks.workload_submit(urgent.pk) == "failed"

    urgent.refresh_from_db()
    assert urgent.phase == Workload.Phase.FAILED
    assert urgent.reason.startswith("Not created in the cluster: You may launch PyTorch training in vision at low or normal")
    assert urgent.submitted_at is None


# --- The template declares what it offers -------------------------------------------------------


def test_a_template_offers_members_low_and_normal_unless_it_says_otherwise(training):
    assert training.current.allowed_priorities == ["low", "normal"]


def test_a_default_tier_the_template_does_not_offer_is_refused(admin_user, flavor):
    with pytest.raises(DomainError) as refused:
        services.template_create(user=admin_user, slug="x", name="X", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                 image="x/y:1", default_priority=Priority.HIGH)
    assert refused.value.message == ("The default priority high must be one the template allows (low, normal): "
                                     "members launch at it.")


@pytest.mark.parametrize("allowed", [[], ["urgent"], "high", ["low", "low"], [None]])
def test_allowed_priorities_that_are_not_a_list_of_tiers_are_refused(admin_user, flavor, allowed):
    with pytest.raises(DomainError) as refused:
        services.template_create(user=admin_user, slug="x", name="X", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                 image="x/y:1", allowed_priorities=allowed)
    assert refused.value.field == "allowed_priorities"


def test_the_api_shows_and_takes_the_tiers_a_template_offers(admin_user, lead, ready_team, flavor):
    body = {"slug": "own", "name": "Own", "kind": "training", "flavors": [flavor.slug], "image": "x/y:1",
            "owner_team": "vision", "allowed_priorities": ["normal", "high"]}

    created = api(lead).post("/api/templates/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["version"]["allowed_priorities"] == ["normal", "high"]

    refused = api(lead).patch("/api/templates/own/", {"allowed_priorities": ["urgent"]}, format="json")
    assert refused.status_code == 400
    assert refused.json()["message"] == "allowed_priorities: “urgent” is not a priority; choose one of low, normal, high."


def test_a_revision_keeps_the_tiers_it_does_not_change(admin_user, flavor):
    template = services.template_create(user=admin_user, slug="x", name="X", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                        image="x/y:1", allowed_priorities=["low"], default_priority="low",
                                        parameters=TRAINING_PARAMS)
    version = services.template_revise(user=admin_user, template=template, max_units=4)
    assert (version.allowed_priorities, version.default_priority) == (["low"], "low")


# --- The launch form offers only what the person may use, and says why the rest is missing --------


def test_the_launch_form_offers_a_member_low_and_normal_and_says_why_high_is_missing(ready_team, member, training, as_user):
    page = as_user(member).get(reverse("jobs:workload-launch") + f"?template={training.pk}&team=vision").content.decode()

    assert '<option value="low">' in page and '<option value="normal" selected>' in page
    assert '<option value="high"' not in page
    assert ("High priority is for the team&#x27;s leads and platform admins, unless the template offers it to members."
            in page)


def test_the_launch_form_offers_the_lead_every_tier(ready_team, lead, training, as_user):
    page = as_user(lead).get(reverse("jobs:workload-launch") + f"?template={training.pk}&team=vision").content.decode()

    assert '<option value="high">' in page and "High priority is for" not in page


def test_a_high_priority_sent_through_the_form_anyway_is_refused_next_to_the_priority(ready_team, member, training, as_user):
    page = as_user(member).post(reverse("jobs:workload-launch"), {
        "team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "priority": "high", "p_epochs": "3",
        "p_learning_rate": "0.01", "p_image_tag": "2.4"}).content.decode()

    assert "at low or normal priority, not high" in page
    assert not Workload.objects.exists()


def test_a_member_of_two_teams_gets_high_only_where_they_lead(ready_team, other_team, training, flavor, admin_user):
    both = UserFactory(username="bea")
    MembershipFactory(team=ready_team, user=both, role=Membership.Role.MEMBER)
    MembershipFactory(team=other_team, user=both, role=Membership.Role.LEAD)
    version = training.current
    assert rules.allowed_priorities(both, ready_team, version) == ["low", "normal"]
    assert rules.allowed_priorities(both, other_team, version) == ["low", "normal", "high"]


def test_upgrading_keeps_each_versions_default_tier_and_its_images_registry(admin_user, flavor, settings):
    from importlib import import_module

    from django.apps import apps

    from jobs.models import ImageRegistry, WorkloadTemplateVersion

    migration = import_module("jobs.migrations.0005_template_priorities_limits_and_image_registries")
    template = services.template_create(user=admin_user, slug="serve", name="Serve", kind=WorkloadKind.TRAINING,
                                        flavors=[flavor], image="vllm/vllm-openai:v0.6.3")
    WorkloadTemplateVersion.objects.filter(template=template).update(default_priority="high")  # as before the rule

    migration.keep_existing_templates_launchable(apps, None)

    assert template.current.allowed_priorities == ["low", "normal", "high"]
    assert list(ImageRegistry.objects.values_list("prefix", flat=True)) == ["docker.io/vllm/vllm-openai"]
    settings.PORTAL_IMAGE_REGISTRIES = []
    assert services.image_no_longer_allowed(template.current) == ""
