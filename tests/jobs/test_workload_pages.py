"""The workload pages: launching through the form on the simulated cluster, the live quota hint,
the list with its filters and polling, one workload's page with its timeline and why it waits,
stop and relaunch through htmx, isolation between teams, CSRF, and bounded queries."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs import access, services, sync
from jobs.models import RunInterval, Workload, WorkloadKind
from portal.kube import reset_gateway
from portal.kube.counting import CountingGateway
from portal.kube.simulated import SimulatedGateway
from tenants import cluster_selectors
from tests.billing.factories import rate
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import make_ready

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
TRAINING_PARAMS = [
    {"name": "epochs", "type": "int", "default": 10, "min": 1, "max": 1000},
    {"name": "learning_rate", "type": "float", "default": 0.001, "min": 0.0000001, "max": 1},
    {"name": "image_tag", "type": "choice", "default": "2.5", "choices": ["2.4", "2.5"]},
    {"name": "mixed_precision", "type": "bool", "default": True},
]


@pytest.fixture
def training(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="pytorch-train", name="PyTorch training", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="pytorch/pytorch:2.5", command=["python", "train.py"],
        args=["--epochs", "{epochs}", "--lr", "{learning_rate}", "--amp", "{mixed_precision}"], env={"TAG": "{image_tag}"},
        default_units=1, max_units=8, parameters=TRAINING_PARAMS,
    )


@pytest.fixture
def notebook(admin_user, flavor):
    return services.template_create(user=admin_user, slug="jupyter", name="Jupyter notebook", kind=WorkloadKind.NOTEBOOK,
                                    flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])


def launch_data(**overrides: Any) -> dict[str, Any]:
    data = {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "units": "2", "cpu": "4", "memory_gib": "16",
            "priority": "normal", "name": "detector", "p_epochs": "3", "p_learning_rate": "0.01", "p_image_tag": "2.4",
            "p_mixed_precision": "true"}
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def launch(user, team, template, flavor, **kwargs):
    return services.workload_launch(user=user,
                                    request=services.LaunchRequest(team=team, template=template, flavor=flavor, **kwargs))


def ok(response: Any) -> str:
    """The body of a page that must have rendered: what a page does not show means nothing on an error page."""
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def advance(cluster: SimulatedGateway, seconds: float) -> None:
    cluster.advance(seconds)
    sync.sync_all()


# --- Templates and the launch form ------------------------------------------------------------------


def test_the_template_list_shows_kind_image_flavors_parameters_and_a_launch_button(training, member, as_user):
    page = as_user(member).get(reverse("jobs:template-list")).content.decode()
    assert "PyTorch training" in page and "Training" in page
    assert "pytorch/pytorch:2.5" in page and "H100 80GB" in page
    assert "epochs = 10" in page and "(2.4, 2.5)" in page
    assert f'{reverse("jobs:workload-launch")}?template={training.pk}' in page


def test_the_template_list_hides_another_teams_private_template(training, member, admin_user, other_team, flavor, as_user):
    services.template_create(user=admin_user, slug="speech-only", name="Speech only", kind="training", owner_team=other_team,
                             flavors=[flavor], image="x")
    page = ok(as_user(member).get(reverse("jobs:template-list")))
    assert "PyTorch training" in page and "Speech only" not in page


def test_the_launch_form_renders_an_input_per_parameter_with_defaults_and_bounds(
    ready_team, member, training, mig_flavor, as_user,
):
    page = ok(as_user(member).get(reverse("jobs:workload-launch") + f"?template={training.pk}&team=vision"))
    assert 'name="p_epochs" value="10"' in page and 'min="1" max="1000"' in page
    assert 'name="p_learning_rate" value="0.001"' in page and 'step="any"' in page
    assert '<option value="2.5" selected>' in page
    assert 'type="checkbox" id="id_p_mixed_precision" name="p_mixed_precision" value="true" checked' in page
    assert 'value="h100-80gb" selected' in page and "a100-1g10gb" not in page  # only the template's flavors
    assert 'hx-get="/launch/hint/"' in page


def test_the_launch_form_picks_a_flavor_the_team_holds_before_one_it_would_borrow(ready_team, member, admin_user, flavor,
                                                                                     mig_flavor, as_user):
    # Both flavors allowed, the MIG one first by name: vision holds only H100, so launching with
    # the defaults must not borrow other teams' MIG slices.
    both = services.template_create(user=admin_user, slug="either", name="Either", kind=WorkloadKind.TRAINING,
                                    flavors=[mig_flavor, flavor], image="x")
    url = reverse("jobs:workload-launch") + f"?template={both.pk}&team=vision"
    page = ok(as_user(member).get(url))
    assert 'value="h100-80gb" selected' in page and 'value="a100-1g10gb" selected' not in page


def test_launching_through_the_form_records_the_workload_and_the_cluster_runs_it(ready_team, member, training, simulated,
                                                                                  as_user, django_capture_on_commit_callbacks):
    client = as_user(member)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("jobs:workload-launch"), launch_data())
    workload = Workload.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("jobs:workload-detail", args=[workload.pk])
    assert (workload.name, workload.units, workload.owner, workload.phase) == ("detector", 2, member, Workload.Phase.QUEUED)
    assert workload.parameters == {"epochs": 3, "learning_rate": 0.01, "image_tag": "2.4", "mixed_precision": True}
    advance(simulated, 1)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    page = client.get(response["Location"]).content.decode()
    assert "Launched detector" in page and "Running" in page


def test_an_unchecked_bool_parameter_is_false(ready_team, member, training, as_user):
    as_user(member).post(reverse("jobs:workload-launch"), launch_data(p_mixed_precision=None))
    assert Workload.objects.get().parameters["mixed_precision"] is False


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"units": "9"}, "units", "GPU units must be between 1 and 8 for PyTorch training."),
    ({"p_epochs": "0"}, "p_epochs", "epochs must be between 1 and 1000; 0 is outside."),
    ({"p_learning_rate": "fast"}, "p_learning_rate", "learning_rate must be a number, not “fast”."),
    ({"flavor": "a100-1g10gb"}, "flavor", "PyTorch training cannot run on A100 1g.10gb; choose one of: H100 80GB."),
    ({"cpu": "1000"}, "cpu", "CPU cores must be between 1 and 32."),
])
def test_a_refused_launch_keeps_the_values_and_shows_the_message_on_the_field(ready_team, member, training, mig_flavor, as_user,
                                                                             overrides, field, message):
    response = as_user(member).post(reverse("jobs:workload-launch"), launch_data(**overrides))
    assert response.status_code == 200
    assert not Workload.objects.exists()
    form = response.context["form"]
    assert form.errors == {field: [message]}
    page = response.content.decode()
    assert message.replace("“", "&quot;").replace("”", "&quot;") in page or message in page
    assert 'name="name" maxlength="60" value="detector"' in page
    assert 'name="p_image_tag"' in page and '<option value="2.4" selected>' in page
    for key in ("units", "cpu", "p_epochs", "p_learning_rate"):
        assert f'value="{launch_data(**overrides)[key]}"' in page


# --- The live hint ---------------------------------------------------------------------------------------


def hint(client, **overrides: Any) -> str:
    response = client.get(reverse("jobs:launch-hint"), launch_data(**overrides), **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_the_hint_shows_guaranteed_in_use_and_free_and_that_it_fits(ready_team, member, training, flavor, simulated, as_user,
                                                                    django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, ready_team, training, flavor, units=1)
    advance(simulated, 1)
    fragment = hint(as_user(member), units="2")
    assert "<html" not in fragment
    assert 'data-testid="hint-guaranteed">4<' in fragment
    assert 'data-testid="hint-in-use">1<' in fragment
    assert 'data-testid="hint-free">3<' in fragment
    assert "Fits your guarantee" in fragment
    assert "2 × 1 GPU = 2 physical GPUs" in fragment
    assert "About 2.00 USD per hour at the current rate" in fragment  # make_ready's 1.00 per GPU-hour


def test_the_hint_says_borrowed_when_units_exceed_the_free_guarantee(ready_team, other_team, flavor, member, training, as_user):
    make_ready(other_team, flavor, 4)  # a team with idle quota to lend
    fragment = hint(as_user(member), units="6")
    assert "Would borrow 2 units of other teams' idle quota" in fragment
    assert "may be preempted" in fragment


def test_the_hint_leaves_out_idle_quota_a_workload_already_waiting_will_take(ready_team, other_team, flavor, member, training,
                                                                               as_user):
    make_ready(other_team, flavor, 9)  # 9 idle units to lend
    launch(member, ready_team, training, flavor, units=8)  # launched a moment ago: 4 own + 4 borrowed, not yet admitted

    fragment = hint(as_user(member), units="8")

    assert "Would borrow" not in fragment and "Would wait in the queue" in fragment
    assert "they take 4 of vision's free units and 4 of the idle units other teams lend" in fragment


def test_the_hint_says_it_would_wait_when_nobody_has_quota_to_lend(ready_team, member, training, as_user):
    fragment = hint(as_user(member), units="6")
    assert "Would wait in the queue" in fragment and "Would borrow" not in fragment


def test_the_hint_shows_the_refusal_when_more_than_the_team_could_ever_get(team, flavor, simulated, member, training, as_user):
    make_ready(team, flavor, 4, may_borrow=False)
    fragment = hint(as_user(member), units="5")
    assert "5 H100 80GB units is more than vision could ever get at once (4); ask for fewer." in fragment
    assert "Would borrow" not in fragment


def test_the_hint_shows_bounds_problems_before_submit(ready_team, member, training, as_user):
    assert "epochs must be between 1 and 1000" in hint(as_user(member), p_epochs="5000")


def test_the_hint_says_so_when_the_cluster_is_silent(ready_team, member, training, as_user, monkeypatch):
    from portal.kube import KubeError

    def silent(**kwargs: Any) -> None:
        raise KubeError("connection refused")

    monkeypatch.setattr(cluster_selectors, "cluster_queue_usage", silent)
    fragment = hint(as_user(member))
    assert "The cluster did not answer" in fragment and "About 2.00 USD per hour at the current rate" in fragment


# --- The list ------------------------------------------------------------------------------------------------


def test_the_list_filters_by_team_phase_owner_and_template(ready_team, member, lead, training, notebook, flavor, as_user):
    MembershipFactory(team=ready_team, user=UserFactory(username="bob"))
    mine = launch(member, ready_team, training, flavor, name="mine-train")
    theirs = launch(lead, ready_team, notebook, flavor, name="lead-notebook")
    Workload.objects.filter(pk=theirs.pk).update(phase=Workload.Phase.SUCCEEDED)
    client = as_user(member)
    url = reverse("jobs:workload-list")

    def names(query: str) -> set[str]:
        response = client.get(url + query, **HTMX)
        return {w.name for w in response.context["workloads"]}

    assert names("") == {"mine-train", "lead-notebook"}
    assert names("?mine=1") == {"mine-train"}
    assert names("?phase=succeeded") == {"lead-notebook"}
    assert names("?template=jupyter") == {"lead-notebook"}
    assert names("?team=vision&template=pytorch-train") == {"mine-train"}
    page = client.get(url).content.decode()
    assert f"#{mine.pk}" in page and "H100 80GB × 1" in page and "PyTorch training" in page and ">v1<" in page


def test_the_list_polls_fast_while_something_is_active_and_slowly_otherwise_so_new_launches_appear(
        ready_team, member, training, flavor, as_user):
    client = as_user(member)
    empty = client.get(reverse("jobs:workload-list")).content.decode()
    assert 'hx-trigger="every 15s"' in empty  # nothing active at load: a later launch must still show up
    workload = launch(member, ready_team, training, flavor)
    assert f"#{workload.pk}<" in ok(client.get(reverse("jobs:workload-list"), **HTMX))
    assert 'hx-trigger="every 3s"' in client.get(reverse("jobs:workload-list")).content.decode()
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.SUCCEEDED)
    fragment = ok(client.get(reverse("jobs:workload-list"), **HTMX))
    assert fragment.lstrip().startswith('<div id="workload-rows"') and f"#{workload.pk}<" in fragment
    assert "every 3s" not in fragment and 'hx-trigger="every 15s"' in fragment


def test_the_list_paginates_by_25(ready_team, member, training, flavor, as_user):
    for i in range(30):
        launch(member, ready_team, training, flavor, name=f"run-{i}")
    page = as_user(member).get(reverse("jobs:workload-list")).content.decode()
    assert "Page 1 of 2" in page and page.count('<tr id="workload-') == 25


def test_lists_never_show_another_teams_workloads(ready_team, other_team, member, outsider, training, flavor, simulated, as_user):
    make_ready(other_team, flavor, 2)
    launch(member, ready_team, training, flavor, name="vision-secret")
    launch(outsider, other_team, training, flavor, name="speech-run")
    page = ok(as_user(outsider).get(reverse("jobs:workload-list")))
    assert "speech-run" in page and "vision-secret" not in page
    response = as_user(outsider).get(reverse("jobs:workload-list") + "?team=vision")
    filtered = ok(response)
    assert re.search(r"<h1[^>]*>\s*Workloads\s*</h1>", filtered)
    assert "vision-secret" not in filtered
    # A team the user cannot see matches nothing, like a team that does not exist.
    assert list(response.context["workloads"]) == []
    assert list(as_user(outsider).get(reverse("jobs:workload-list") + "?team=no-such-team").context["workloads"]) == []


# --- One workload ------------------------------------------------------------------------------------------


@pytest.fixture
def waiting_pair(team, flavor, simulated, member, training, django_capture_on_commit_callbacks):
    """A team with 1 GPU guaranteed that may not borrow launches two 1-GPU runs: the second waits."""
    make_ready(team, flavor, 1, may_borrow=False)
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, team, training, flavor, name="first")
    with django_capture_on_commit_callbacks(execute=True):
        second = launch(member, team, training, flavor, name="second")
    advance(simulated, 1)
    first.refresh_from_db()
    second.refresh_from_db()
    return first, second


def test_a_queued_workload_page_shows_its_timeline_and_why_it_waits(waiting_pair, member, as_user):
    first, second = waiting_pair
    assert (first.phase, second.phase) == (Workload.Phase.RUNNING, Workload.Phase.QUEUED)
    page = as_user(member).get(reverse("jobs:workload-detail", args=[second.pk])).content.decode()
    assert 'data-testid="timeline"' in page
    assert "Recorded; creating its objects in the cluster" in page and "Submitting" in page and "Queued" in page
    assert 'data-testid="why-waiting"' in page and "Why is it waiting?" in page
    assert "Waiting for quota" in page
    assert "<strong>1</strong> guaranteed" in page and "<strong>1</strong> in use" in page
    assert "<strong>0</strong> borrowed" in page and "<strong>0</strong> lent" in page
    assert "the team may not borrow" in page
    assert "Kueue lists it <strong>number 1</strong> in vision's queue" in page
    assert "next in line" not in page
    assert "every 3s" in page


def test_a_running_workload_says_it_runs_on_guaranteed_capacity_and_shows_pods_but_not_logs(waiting_pair, member, as_user):
    first, _ = waiting_pair
    client = as_user(member)
    page = ok(client.get(reverse("jobs:workload-detail", args=[first.pk])))
    assert "Runs on vision's <strong>guaranteed</strong> quota" in page and "Why is it waiting?" not in page
    live = client.get(reverse("jobs:workload-live", args=[first.pk]), **HTMX).content.decode()
    assert live.lstrip().startswith("<section id=\"workload-live\"")
    assert 'data-testid="pod"' in live and "[simulated]" not in live
    assert 'hx-trigger="every 3s"' in live
    interval = first.intervals.get()
    assert interval.pod_name in live and interval.node in live


def test_a_workload_page_shows_its_status_and_stop_first_then_its_gpu_use_logs_and_resources(waiting_pair, member, as_user):
    first, _ = waiting_pair
    page = ok(as_user(member).get(reverse("jobs:workload-detail", args=[first.pk])))
    order = [page.index(f'data-testid="{part}"') for part in ("phase", "used-so-far", "stop", "telemetry", "show-logs")]
    assert order == sorted(order), order
    assert page.index('data-testid="stop"') < page.index("<h2>Resources</h2>")


def test_what_a_workload_used_so_far_comes_with_each_poll_of_its_page(ready_team, member, training, flavor, as_user):
    rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    workload = launch(member, ready_team, training, flavor, units=2)
    client = as_user(member)

    def poll() -> str:
        return client.get(reverse("jobs:workload-live", args=[workload.pk]), **HTMX).content.decode()

    assert '<span data-testid="workload-cost">0.00 GPU-h</span>' in poll()
    RunInterval.objects.create(workload=workload, pod_uid="uid-1", pod_name=f"{workload.k8s_name}-0", units=2,
                               resource_name=flavor.resource_name, started_at=timezone.now() - dt.timedelta(hours=2),
                               ended_at=timezone.now() - dt.timedelta(minutes=30))
    assert '<span data-testid="workload-cost">3.00 GPU-h · 6.00 USD</span>' in poll()  # without a reload of the page
    page = ok(client.get(reverse("jobs:workload-detail", args=[workload.pk])))
    assert page.count('data-testid="workload-cost"') == 1  # in the polled part only, not again under Resources


def test_the_logs_panel_is_closed_until_opened_and_has_a_real_link(waiting_pair, member, as_user):
    first, _ = waiting_pair
    page = as_user(member).get(reverse("jobs:workload-detail", args=[first.pk])).content.decode()
    logs_url = reverse("jobs:workload-logs", args=[first.pk])
    assert f'href="{logs_url}" hx-get="{logs_url}"' in page and 'data-testid="show-logs"' in page
    assert 'data-testid="logs"' not in page and "[simulated]" not in page


def test_opening_the_logs_panel_through_htmx_answers_with_the_newest_pods_last_lines(waiting_pair, member, as_user):
    first, _ = waiting_pair
    pod = first.intervals.get().pod_name
    fragment = as_user(member).get(reverse("jobs:workload-logs", args=[first.pk]), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="workload-logs"')
    assert 'data-testid="logs"' in fragment and "[simulated] phase Running" in fragment and f"<code>{pod}</code>" in fragment
    assert 'data-testid="refresh-logs"' in fragment and 'id="workload-live"' not in fragment


def test_the_logs_link_without_htmx_renders_the_whole_page_with_the_panel_open(waiting_pair, member, as_user):
    first, _ = waiting_pair
    page = as_user(member).get(reverse("jobs:workload-logs", args=[first.pk])).content.decode()
    assert "<html" in page and 'id="workload-live"' in page
    assert 'data-testid="logs"' in page and "[simulated] phase Running" in page


@pytest.fixture
def counting(simulated):
    wrapper = CountingGateway(simulated)
    reset_gateway(wrapper)
    yield wrapper
    reset_gateway(simulated)


def test_a_poll_of_a_running_workloads_live_fragment_reads_no_logs_and_one_list_of_events(waiting_pair, member, as_user,
                                                                                           counting):
    first, _ = waiting_pair
    assert first.phase == Workload.Phase.RUNNING
    assert as_user(member).get(reverse("jobs:workload-live", args=[first.pk]), **HTMX).status_code == 200
    assert counting.calls["pod_logs"] == 0
    assert counting.kinds[("list", "Event")] == 1
    assert (dict(counting.kinds), counting.total) == ({("list", "Pod"): 1, ("list", "Event"): 1}, 2)


def event(namespace: str, involved: str, kind: str, reason: str, at: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{involved}.{reason.lower()}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": involved, "namespace": namespace}, "reason": reason,
            "message": f"{reason} of {involved}", "type": "Warning" if reason == "BackOff" else "Normal", "lastTimestamp": at}


def test_the_live_fragment_shows_the_newest_pods_events_and_none_of_the_rest_of_the_namespace(waiting_pair, member, simulated,
                                                                                                as_user):
    first, _ = waiting_pair
    pod = first.intervals.get().pod_name
    namespace = first.team.namespace
    for obj in [event(namespace, pod, "Pod", "Pulled", "2026-11-23T10:00:01Z"),
                event(namespace, pod, "Pod", "BackOff", "2026-11-23T10:00:02Z"),
                event(namespace, first.k8s_name, "Job", "SuccessfulCreate", "2026-11-23T10:00:00Z"),
                event(namespace, "someone-elses-pod", "Pod", "Started", "2026-11-23T10:00:03Z")]:
        simulated.apply(obj)
    live = as_user(member).get(reverse("jobs:workload-live", args=[first.pk]), **HTMX).content.decode()
    assert f"of <code>{pod}</code>" in live
    assert live.index("BackOff of") < live.index("Pulled of"), "newest first"
    assert "someone-elses-pod" not in live and "SuccessfulCreate" not in live


def test_a_workload_without_pods_shows_the_events_of_its_own_object(waiting_pair, member, simulated, as_user):
    _, second = waiting_pair
    namespace = second.team.namespace
    simulated.apply(event(namespace, second.k8s_name, "Job", "Suspended", "2026-11-23T10:00:00Z"))
    live = as_user(member).get(reverse("jobs:workload-live", args=[second.pk]), **HTMX).content.decode()
    assert f"of <code>{second.k8s_name}</code>" in live and "Suspended of" in live


def test_a_finished_workload_stops_polling(waiting_pair, member, simulated, as_user):
    first, _ = waiting_pair
    advance(simulated, 40)
    first.refresh_from_db()
    assert first.phase == Workload.Phase.SUCCEEDED
    client = as_user(member)
    page = ok(client.get(reverse("jobs:workload-detail", args=[first.pk])))
    assert 'hx-trigger="load"' in page and "every 3s" not in page
    live = ok(client.get(reverse("jobs:workload-live", args=[first.pk]), **HTMX))
    assert "hx-trigger" not in live and "Succeeded" in live


def test_a_borrowing_workload_says_it_may_be_preempted(ready_team, other_team, member, training, flavor, simulated, as_user,
                                                      django_capture_on_commit_callbacks):
    make_ready(other_team, flavor, 8)  # idle quota in the cohort to borrow
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=6)
    advance(simulated, 1)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING and workload.on_borrowed
    page = as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert "Runs on <strong>borrowed</strong> capacity" in page and "may be preempted" in page


def test_a_notebook_page_shows_its_endpoint_and_the_hand_over_but_never_the_token(ready_team, member, notebook, flavor,
                                                                                   as_user):
    workload = launch(member, ready_team, notebook, flavor)
    page = as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert services.endpoint(workload) in page and 'data-testid="reveal-token"' in page
    assert access.notebook_token(workload) not in page and "?token=" not in page


def test_stopping_through_htmx_answers_with_the_stopped_fragment(ready_team, member, training, flavor, simulated, as_user,
                                                                django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor)
    advance(simulated, 1)
    client = as_user(member)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("jobs:workload-stop", args=[workload.pk]), **HTMX)
    assert response.status_code == 200
    fragment = response.content.decode()
    assert fragment.lstrip().startswith('<section id="workload-live"') and "Stopped by alice" in fragment
    assert 'data-testid="stop"' not in fragment
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.STOPPED
    again = client.post(reverse("jobs:workload-stop", args=[workload.pk]), **HTMX).content.decode()
    assert "there is nothing to stop" in again


def test_a_member_cannot_stop_someone_elses_workload(ready_team, member, lead, training, flavor, as_user):
    workload = launch(lead, ready_team, training, flavor)
    page = ok(as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])))
    assert 'data-testid="stop"' not in page
    assert 'data-testid="stop"' in ok(as_user(lead).get(reverse("jobs:workload-detail", args=[workload.pk])))
    assert as_user(member).post(reverse("jobs:workload-stop", args=[workload.pk]), **HTMX).status_code == 403
    workload.refresh_from_db()
    assert workload.is_active


def test_relaunching_through_htmx_redirects_to_the_new_workload(ready_team, member, training, flavor, as_user):
    workload = launch(member, ready_team, training, flavor, units=2, parameters={"epochs": 7}, name="again")
    response = as_user(member).post(reverse("jobs:workload-relaunch", args=[workload.pk]), **HTMX)
    new = Workload.objects.exclude(pk=workload.pk).get()
    assert response["HX-Redirect"] == reverse("jobs:workload-detail", args=[new.pk])
    assert (new.relaunch_of, new.units, new.parameters["epochs"], new.name) == (workload, 2, 7, "again")


def test_stop_refuses_a_post_without_a_csrf_token(ready_team, member, training, flavor, as_user):
    workload = launch(member, ready_team, training, flavor)
    response = as_user(member, enforce_csrf=True).post(reverse("jobs:workload-stop", args=[workload.pk]), **HTMX)
    assert response.status_code == 403
    workload.refresh_from_db()
    assert workload.is_active


# --- Isolation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "method"), [
    ("jobs:workload-detail", "get"), ("jobs:workload-live", "get"), ("jobs:workload-logs", "get"), ("jobs:workload-stop", "post"),
    ("jobs:workload-relaunch", "post"),
    ("jobs:workload-scale", "post"),
])
def test_an_outsider_gets_404_on_every_workload_url(ready_team, member, outsider, training, flavor, as_user, name, method):
    workload = launch(member, ready_team, training, flavor)
    response = getattr(as_user(outsider), method)(reverse(name, args=[workload.pk]), **HTMX)
    assert response.status_code == 404
    workload.refresh_from_db()
    assert workload.is_active and Workload.objects.count() == 1


def test_an_outsider_gets_404_launching_for_another_team(ready_team, outsider, training, as_user):
    client = as_user(outsider)
    assert client.get(reverse("jobs:workload-launch") + "?team=vision&template=pytorch-train").status_code == 404
    assert client.post(reverse("jobs:workload-launch"), launch_data()).status_code == 404
    assert client.get(reverse("jobs:launch-hint"), launch_data(), **HTMX).status_code == 404
    assert not Workload.objects.exists()


# --- Pages and queries ------------------------------------------------------------------------------------


# Each page with the heading it must show: an error page or the wrong template has another.
PAGES: list[tuple[str, list[Any], str]] = [
    ("jobs:template-list", [], "Workload templates"), ("jobs:workload-launch", [], "Launch a workload"),
    ("jobs:workload-list", [], "Workloads"),
]


@pytest.mark.parametrize(("name", "args", "title"), PAGES)
@pytest.mark.parametrize("who", ["member", "lead", "admin_user", "finance_user"])
def test_every_workload_page_renders_for_members_leads_admins_and_finance(name, args, title, who, request, training, member, lead,
                                                                          as_user):
    response = as_user(request.getfixturevalue(who)).get(reverse(name, args=args))
    assert response.status_code == 200
    assert re.search(rf"<h1[^>]*>\s*{re.escape(title)}\s*</h1>", response.content.decode())


@pytest.mark.parametrize(("name", "args", "title"), PAGES)
def test_every_workload_page_sends_anonymous_visitors_to_the_login_page(name, args, title, client):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def count_queries(client, url: str, **headers: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, **headers).status_code == 200
    return len(captured)


def test_the_workload_list_runs_the_same_number_of_queries_for_3_rows_and_for_30(ready_team, member, training, notebook, flavor,
                                                                                  as_user, django_assert_max_num_queries):
    client = as_user(member)
    for i in range(3):
        launch(member, ready_team, training if i % 2 else notebook, flavor, name=f"a-{i}")
    few = count_queries(client, reverse("jobs:workload-list"))
    for i in range(27):
        launch(member, ready_team, training if i % 2 else notebook, flavor, name=f"b-{i}")
    with django_assert_max_num_queries(few):
        assert client.get(reverse("jobs:workload-list")).status_code == 200


def test_the_template_list_runs_the_same_number_of_queries_for_3_templates_and_for_30(admin_user, member, flavor, mig_flavor,
                                                                                      as_user, django_assert_max_num_queries):
    def add(start: int, n: int) -> None:
        for i in range(start, start + n):
            services.template_create(user=admin_user, slug=f"t-{i}", name=f"Template {i:02}", kind="training",
                                     flavors=[flavor, mig_flavor], image="x", parameters=TRAINING_PARAMS[:1])
    client = as_user(member)
    add(0, 3)
    few = count_queries(client, reverse("jobs:template-list"))
    add(3, 27)
    with django_assert_max_num_queries(few):
        assert client.get(reverse("jobs:template-list")).status_code == 200


# --- Admin ---------------------------------------------------------------------------------------------------


def test_the_admin_lists_templates_and_workloads_read_only_for_platform_admins(ready_team, member, admin_user, training, flavor,
                                                                               as_user):
    workload = launch(member, ready_team, training, flavor)
    client = as_user(admin_user)
    assert "PyTorch training" in client.get(reverse("admin:jobs_workloadtemplate_changelist")).content.decode()
    assert "pytorch/pytorch:2.5" in client.get(reverse("admin:jobs_workloadtemplate_change", args=[training.pk])).content.decode()
    listing = client.get(reverse("admin:jobs_workload_changelist")).content.decode()
    assert workload.name in listing and "alice" in listing
    assert client.get(reverse("admin:jobs_workload_add")).status_code == 403
    staff = UserFactory(username="staffer", is_staff=True)
    assert as_user(staff).get(reverse("admin:jobs_workload_changelist")).status_code == 403


def test_an_inference_server_scales_from_its_page(ready_team, member, flavor, simulated, as_user, admin_user,
                                                  django_capture_on_commit_callbacks):
    from jobs.models import WorkloadKind

    vllm = services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor],
                                    image="vllm/vllm-openai:v0.6.3", port=8000,
                                    parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}])
    with django_capture_on_commit_callbacks(execute=True):
        server = launch(member, ready_team, vllm, flavor)
    client = as_user(member)
    assert 'data-testid="scale"' in client.get(reverse("jobs:workload-detail", args=[server.pk])).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        fragment = client.post(reverse("jobs:workload-scale", args=[server.pk]), {"replicas": "2"}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    server.refresh_from_db()
    assert server.workers == 2
    refused = client.post(reverse("jobs:workload-scale", args=[server.pk]), {"replicas": "9"}, HTTP_HX_REQUEST="true")
    assert "Replicas must be between 1 and 4" in refused.content.decode()


def _ddp(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="ddp", name="DDP", kind=WorkloadKind.DISTRIBUTED, flavors=[flavor], image="x/y:1",
        default_units=1, max_units=8, parameters=[{"name": "workers", "type": "int", "default": 2, "min": 1, "max": 8}],
    )


def test_a_distributed_launch_says_units_are_per_worker_and_its_refusal_and_cost_count_every_worker(
        team, flavor, simulated, member, admin_user, finance_user, as_user):
    from billing.rates import services as billing_services

    make_ready(team, flavor, 4, may_borrow=False)
    ddp = _ddp(admin_user, flavor)
    billing_services.rate_set(actor=finance_user, flavor=flavor, price_per_gpu_hour="1")
    client = as_user(member)
    form = client.get(reverse("jobs:workload-launch"), {"team": "vision", "template": ddp.pk}).content.decode()
    assert ">GPU units per worker</label>" in form and "for each worker" in form

    fragment = hint(client, template=str(ddp.pk), units="4", p_workers="8", p_epochs=None, p_learning_rate=None,
                    p_image_tag=None, p_mixed_precision=None)
    assert "32 H100 80GB units (8 pods × 4 units) is more than vision could ever get at once (4)" in fragment
    assert "8 pods × 4 units each = 32 units" in fragment
    assert "About 32.00 USD per hour" in fragment  # not 4.00: every worker's GPUs cost


def test_without_an_ingress_a_notebook_page_says_how_to_reach_it_not_a_dead_link(ready_team, member, notebook, flavor, as_user,
                                                                                 settings):
    workload = launch(member, ready_team, notebook, flavor)
    settings.PORTAL_CLUSTER = "kubernetes"
    page = as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert 'data-testid="open-notebook"' not in page
    assert f"kubectl -n {ready_team.namespace} port-forward svc/{workload.k8s_name} 8888:80" in page
    assert "http://localhost:8888/" in page and 'data-copy="port-forward"' in page


def test_on_the_simulated_cluster_a_notebook_page_says_it_is_simulated(ready_team, member, notebook, flavor, as_user):
    workload = launch(member, ready_team, notebook, flavor)
    page = as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert "simulated cluster" in page and "port-forward" not in page
    assert "the notebook does not really run, so there is nothing to open" in page  # it said "the does not really run"


def test_with_an_ingress_domain_the_notebook_opens_through_the_portal_and_no_hint_is_shown(ready_team, member, notebook,
                                                                                           flavor, as_user, settings):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.example.com"
    workload = launch(member, ready_team, notebook, flavor)
    workload.phase = Workload.Phase.RUNNING
    workload.save()
    page = as_user(member).get(reverse("jobs:workload-detail", args=[workload.pk])).content.decode()
    assert 'data-testid="open-notebook"' in page and 'data-testid="how-to-reach"' not in page


# --- Logs: a choice of pod, the whole log as a file, following while it runs ----------------------------


@pytest.fixture
def two_workers(ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks):
    ddp = _ddp(admin_user, flavor)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, ddp, flavor, units=1, parameters={"workers": 2})
    advance(simulated, 1)
    workload.refresh_from_db()
    return workload


def test_a_multi_pod_workloads_logs_offer_each_pod_and_show_the_one_chosen(two_workers, member, as_user):
    client = as_user(member)
    fragment = client.get(reverse("jobs:workload-logs", args=[two_workers.pk]), **HTMX).content.decode()
    pods = re.findall(r'<option value="([^"]+)"', fragment)
    assert len(pods) == 2 and all(name.startswith(two_workers.k8s_name) for name in pods)
    other = pods[1]
    chosen = client.get(reverse("jobs:workload-logs", args=[two_workers.pk]), {"pod": other}, **HTMX).content.decode()
    assert f"<code>{other}</code>" in chosen and f"[simulated] pod {other} scheduled on" in chosen
    assert f'<option value="{other}" selected>' in chosen


def test_a_pod_that_is_not_the_workloads_is_refused(two_workers, member, as_user):
    client = as_user(member)
    fragment = client.get(reverse("jobs:workload-logs", args=[two_workers.pk]), {"pod": "kube-apiserver"}, **HTMX)
    assert "has no pod “kube-apiserver”" in fragment.content.decode()
    download = client.get(reverse("jobs:workload-logs-download", args=[two_workers.pk]), {"pod": "kube-apiserver"})
    assert download.status_code == 404


def test_a_pod_asked_of_a_workload_with_no_pods_yet_is_a_404_not_the_clusters_fault(ready_team, member, training, flavor,
                                                                                     simulated, as_user):
    # It was a 502 ("the cluster did not answer") whenever the workload had no pods to offer.
    workload = launch(member, ready_team, training, flavor)
    download = as_user(member).get(reverse("jobs:workload-logs-download", args=[workload.pk]), {"pod": "kube-apiserver"})
    assert download.status_code == 404 and "has no pod “kube-apiserver”" in download.content.decode()


def test_the_whole_log_downloads_as_a_file(two_workers, member, as_user):
    response = as_user(member).get(reverse("jobs:workload-logs-download", args=[two_workers.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "text/plain; charset=utf-8"
    assert re.fullmatch(rf'attachment; filename="{two_workers.k8s_name}[-\w]*\.log"', response["Content-Disposition"])
    assert "[simulated] phase Running" in response.content.decode()


def test_following_logs_polls_while_it_runs_and_stops_once_it_ended(two_workers, member, as_user):
    client = as_user(member)
    url = reverse("jobs:workload-logs", args=[two_workers.pk])
    following = client.get(url, {"follow": "1"}, **HTMX).content.decode()
    assert 'hx-trigger="every 3s"' in following and 'data-testid="stop-following"' in following
    Workload.objects.filter(pk=two_workers.pk).update(phase=Workload.Phase.SUCCEEDED)
    ended = client.get(url, {"follow": "1"}, **HTMX).content.decode()
    assert "every 3s" not in ended and 'data-testid="follow-logs"' not in ended


def test_another_teams_member_cannot_download_the_log(two_workers, outsider, as_user):
    assert as_user(outsider).get(reverse("jobs:workload-logs-download", args=[two_workers.pk])).status_code == 404


def test_the_api_reads_the_log_of_a_chosen_pod(two_workers, member):
    from tests.helpers import api

    body = api(member).get(f"/api/workloads/{two_workers.pk}/logs/").json()
    assert len(body["pods"]) == 2 and body["pod"] == body["pods"][0]
    other = api(member).get(f"/api/workloads/{two_workers.pk}/logs/", {"pod": body["pods"][1]}).json()
    assert other["pod"] == body["pods"][1] and other["lines"]
