"""The nodes behind the catalog (issue 24 §1): a flavor whose nodes share their GPUs otherwise than
it says, or that all carry a taint it does not tolerate, is flagged on the catalog page and the
API and refuses launches until a check finds it fixed; what only informs (no node yet, unhealthy
devices, fewer units than the capacity) is said and refuses nothing."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from django.urls import reverse

from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import KubeError, NodeSpec, taint_tolerated
from tenants import catalog, nodes, reconcile
from tenants.models import Flavor
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

TIME_SLICED_4 = {nodes.SHARING_STRATEGY_LABEL: "time-slicing", nodes.REPLICAS_LABEL: "4", nodes.GPU_COUNT_LABEL: "8"}
SHARED_TAINT = {"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}


def node(name: str, labels: dict[str, str], resources: dict[str, int], *, allocatable: dict[str, int] | None = None,
         taints: list[dict[str, str]] | None = None, ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {**({"taints": taints} if taints else {}), **({"unschedulable": True} if cordoned else {})},
            "status": {"capacity": {k: str(v) for k, v in resources.items()},
                       "allocatable": {k: str(v) for k, v in (allocatable or resources).items()},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def shared_flavor(**overrides: Any) -> Flavor:
    fields: dict[str, Any] = dict(
        name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared", sharing_mode=Flavor.SharingMode.TIME_SLICED,
        gpu_model="NVIDIA T4", fraction_numerator=1, fraction_denominator=4, capacity_units=32,
        node_labels={"pool": "t4"}, tolerations=[catalog.SHARED_TAINT])
    return FlavorFactory.create(**{**fields, **overrides})


def test_a_time_sliced_flavor_whose_nodes_share_as_it_says_has_no_problem(db):
    flavor = shared_flavor()
    verdict = nodes.judge(flavor, [node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32},
                                        taints=[SHARED_TAINT])])
    assert verdict == nodes.NodeVerdict(problem="", warnings=(), nodes=1, offered=32)


def test_a_flavor_sold_as_whole_gpus_on_nodes_that_share_them_is_a_problem(flavor):
    # The trust issue's failure, one level down: a member asks for a whole H100 and gets a quarter of one.
    flavor.node_labels = {"pool": "h100"}
    verdict = nodes.judge(flavor, [node("h100-0", {"pool": "h100", **TIME_SLICED_4}, {"nvidia.com/gpu": 32})])
    assert verdict.problem == ("Node h100-0 shares each GPU 4 ways (time-slicing), but H100 80GB is sold as whole GPUs: "
                               "a pod would get 1/4 of a GPU billed as 1 of one.")


@pytest.mark.parametrize("labels, words", [
    ({**TIME_SLICED_4, nodes.REPLICAS_LABEL: "2", nodes.GPU_COUNT_LABEL: "16"},
     ("Node t4-0 splits each GPU 2 ways, so one unit of nvidia.com/gpu.shared is 1/2 of a GPU, but T4 shared prices a unit "
      "as 1/4 of one.")),
    ({**TIME_SLICED_4, nodes.SHARING_STRATEGY_LABEL: "mps"},
     "Node t4-0 shares its GPUs by mps, but T4 shared is time-sliced."),
    ({**TIME_SLICED_4, nodes.SHARING_STRATEGY_LABEL: "none", nodes.REPLICAS_LABEL: "1"},
     "Node t4-0 shares its GPUs by none, but T4 shared is time-sliced."),
])
def test_a_shared_flavor_on_nodes_that_share_otherwise_is_a_problem(db, labels, words):
    verdict = nodes.judge(shared_flavor(), [node("t4-0", {"pool": "t4", **labels}, {"nvidia.com/gpu.shared": 32},
                                                 taints=[SHARED_TAINT])])
    assert verdict.problem == words


def test_one_disagreeing_node_among_good_ones_is_a_problem(db):
    # Kueue may put the pod on any node of the flavor: one node that splits GPUs otherwise bills someone wrongly.
    good = node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32})
    bad = node("t4-1", {"pool": "t4", **TIME_SLICED_4, nodes.REPLICAS_LABEL: "8"}, {"nvidia.com/gpu.shared": 64})
    assert "Node t4-1 splits each GPU 8 ways" in nodes.judge(shared_flavor(), [good, bad]).problem


def test_nodes_that_all_carry_an_untolerated_taint_are_a_problem_and_some_a_warning(db):
    flavor = shared_flavor(tolerations=[])
    tainted = node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32}, taints=[SHARED_TAINT])
    verdict = nodes.judge(flavor, [tainted])
    assert verdict.problem == ("Every node of T4 shared has a taint its pods do not tolerate: t4-0 "
                               "(nvidia.com/gpu.shared=present:NoSchedule). Add the toleration to the flavor, or take the "
                               "taint off the nodes.")
    open_node = node("t4-1", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32})
    verdict = nodes.judge(flavor, [tainted, open_node])
    assert verdict.problem == "" and verdict.offered == 32
    assert ("Pods of T4 shared cannot run on t4-0 (nvidia.com/gpu.shared=present:NoSchedule): a taint they do not "
            "tolerate.") in verdict.warnings


@pytest.mark.parametrize("toleration, tolerates", [
    ({"key": "nvidia.com/gpu.shared", "operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu.shared", "operator": "Equal", "value": "other"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, False),
])
def test_tolerations_match_taints_as_the_scheduler_matches_them(toleration, tolerates):
    assert taint_tolerated(SHARED_TAINT, [toleration]) is tolerates


def test_what_only_informs_is_a_warning_and_refuses_nothing(db):
    flavor = shared_flavor(capacity_units=64)
    tainted = [SHARED_TAINT]
    sick = node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32}, allocatable={"nvidia.com/gpu.shared": 28},
                taints=tainted)
    down = node("t4-1", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32}, ready=False, taints=tainted)
    cordoned = node("t4-2", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32}, cordoned=True, taints=tainted)
    odd = node("t4-3", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 24}, taints=tainted)
    verdict = nodes.judge(flavor, [sick, down, cordoned, odd])
    assert verdict.problem == ""
    assert verdict.offered == 28 + 24  # only ready, schedulable nodes count, at what they can allocate
    assert verdict.warnings == (
        "Node t4-0: 4 of 32 nvidia.com/gpu.shared are unhealthy (allocatable below capacity).",
        "Node t4-1 is not ready.",
        "Node t4-2 is cordoned: nothing new starts on it.",
        ("Node t4-3 has 8 GPUs × 4 replicas = 32 units but advertises 24 nvidia.com/gpu.shared: is its device plugin's "
         "config the one its label names?"),
        "The catalog says 64 units; the nodes offer 52 now.",
    )


def test_a_shared_pool_without_a_taint_is_said(db):
    verdict = nodes.judge(shared_flavor(), [node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {"nvidia.com/gpu.shared": 32})])
    assert verdict.problem == ""
    assert verdict.warnings == (
        ("Node t4-0 shares its GPUs (time-slicing) but carries no taint: a pod asking for a whole GPU may land there if "
         "its flavor's labels match the node. Taint the pool nvidia.com/gpu.shared:NoSchedule (the shared presets "
         "tolerate it)."),)


def test_no_node_and_no_device_plugin_are_warnings(db):
    flavor = shared_flavor()
    assert nodes.judge(flavor, []).warnings == ("No node has pool=t4: nothing runs on T4 shared until one does.",)
    plugin_down = node("t4-0", {"pool": "t4", **TIME_SLICED_4}, {})
    assert nodes.judge(flavor, [plugin_down]).warnings[0] == (
        "1 node(s) carry T4 shared's labels but none advertises nvidia.com/gpu.shared: is the device plugin running on them?")


def test_a_shared_flavor_on_nodes_without_feature_discovery_labels_is_said_to_be_unchecked(db):
    verdict = nodes.judge(shared_flavor(), [node("t4-0", {"pool": "t4"}, {"nvidia.com/gpu.shared": 32})])
    assert verdict.problem == ""
    assert verdict.warnings == (("Node t4-0 does not say how it shares its GPUs (no nvidia.com/gpu.sharing-strategy "
                                 "label from GPU Feature Discovery), so the portal cannot check that one unit is 1/4 of a "
                                 "GPU."),)


def test_a_flavor_without_node_labels_is_judged_on_the_nodes_advertising_its_resource(flavor):
    flavor.node_labels = {}
    shared = node("t4-0", TIME_SLICED_4, {"nvidia.com/gpu": 32})
    other = node("cpu-0", {}, {"cpu": 64})
    verdict = nodes.judge(flavor, [shared, other])
    assert verdict.nodes == 1 and "shares each GPU 4 ways" in verdict.problem


def test_the_simulated_cluster_models_each_pool_as_its_flavor_says_and_the_check_agrees(simulated, flavor):
    shared = shared_flavor(node_labels={"nvidia.com/gpu.product": "Tesla-T4"})
    reconcile.platform_reconcile()  # makes the simulated nodes from the catalog, then checks them
    for each in (flavor, shared):
        each.refresh_from_db()
        assert each.nodes_problem == "" and each.nodes_checked_at is not None
    assert shared.nodes_warning_list == []
    t4 = next(item for item in simulated.list("v1", "Node")[0] if item["metadata"]["name"] == "sim-t4-shared-0")
    assert {key: t4["metadata"]["labels"][key] for key in TIME_SLICED_4} == TIME_SLICED_4
    # The pool carries the taint its flavor tolerates, as a site's shared pool should.
    assert t4["spec"]["taints"] == [{"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}]


def test_a_pool_relabelled_to_share_otherwise_refuses_launches_until_it_is_fixed(
        simulated, ready_team, member, training, flavor, django_capture_on_commit_callbacks):
    nodes.check_flavors()
    flavor.refresh_from_db()
    assert flavor.nodes_problem == ""
    # Someone changes the device plugin's config: the pool now splits each GPU four ways.
    simulated.expect_nodes([NodeSpec(name="sim-h100-0", labels={**flavor.node_labels, **TIME_SLICED_4},
                                     allocatable={flavor.resource_name: 64})])
    nodes.check_flavors()
    body = {"team": ready_team.slug, "template": training.pk, "flavor": flavor.slug, "name": "quarter-of-a-gpu"}
    refused = api(member).post("/api/workloads/", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"]["flavor"] == [
        ("Node sim-h100-0 shares each GPU 4 ways (time-slicing), but H100 80GB is sold as whole GPUs: a pod would get 1/4 "
         "of a GPU billed as 1 of one. Nothing can be launched on H100 80GB until a platform admin makes the flavor and its "
         "nodes agree.")]
    flavor.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(DomainError):
        launch(member, ready_team, training, flavor)
    assert not Workload.objects.exists()
    # The pool is put back; the next check clears the flag and the same launch goes.
    simulated.expect_nodes([NodeSpec(name="sim-h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 16})])
    nodes.check_flavors()
    with django_capture_on_commit_callbacks(execute=True):
        assert api(member).post("/api/workloads/", body, format="json").status_code == 201


def test_the_catalog_page_and_the_api_say_what_the_nodes_say(simulated, admin_user, flavor):
    simulated.expect_nodes([NodeSpec(name="h100-0", labels={**flavor.node_labels, **TIME_SLICED_4},
                                     allocatable={flavor.resource_name: 32})])
    nodes.check_flavors()
    client = login(admin_user)
    for url in (reverse("tenants:flavor-list"), reverse("tenants:flavor-edit", args=[flavor.slug])):
        page = client.get(url).content.decode()
        assert 'data-testid="nodes-problem"' in page and "Node h100-0 shares each GPU 4 ways" in page
        assert 'data-testid="nodes-checked"' in page
    body = api(admin_user).get(f"/api/flavors/{flavor.pk}/").json()
    assert "Node h100-0 shares each GPU 4 ways" in body["nodes_problem"]
    assert body["nodes_warnings"] == [] and body["nodes_checked_at"]


def test_an_admins_save_does_not_clear_what_the_check_found(simulated, admin_user, flavor):
    simulated.expect_nodes([NodeSpec(name="h100-0", labels={**flavor.node_labels, **TIME_SLICED_4},
                                     allocatable={flavor.resource_name: 32})])
    nodes.check_flavors()
    response = api(admin_user).patch(f"/api/flavors/{flavor.pk}/", {"nodes_problem": ""}, format="json")
    assert response.status_code == 400  # read-only: the strict API says so rather than ignoring it
    flavor.refresh_from_db()
    assert "shares each GPU 4 ways" in flavor.nodes_problem


def test_a_cluster_that_does_not_answer_leaves_the_last_verdicts(simulated, flavor, monkeypatch):
    Flavor.objects.filter(pk=flavor.pk).update(nodes_problem="as found before")

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise KubeError("connection refused")

    monkeypatch.setattr(simulated, "list", unreachable)
    with pytest.raises(KubeError):
        nodes.check_flavors()
    flavor.refresh_from_db()
    assert flavor.nodes_problem == "as found before"


def test_one_list_of_nodes_whatever_the_number_of_flavors(simulated, monkeypatch):
    for _ in range(5):
        FlavorFactory.create()
    calls: list[tuple[Any, ...]] = []
    real = simulated.list

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulated, "list", counted)
    assert len(nodes.check_flavors()) == 5
    assert calls == [("v1", "Node")]


@pytest.mark.parametrize("mode, section", [(Flavor.SharingMode.TIME_SLICED, "timeSlicing"), (Flavor.SharingMode.MPS, "mps")])
def test_the_device_plugin_config_for_a_shared_flavor(db, mode, section):
    flavor = shared_flavor(sharing_mode=mode, node_labels={nodes.DEVICE_PLUGIN_CONFIG_LABEL: "t4-x4"})
    assert nodes.device_plugin_config(flavor) is not None
    name, text = nodes.device_plugin_config(flavor) or ("", "")
    assert name == "t4-x4"
    assert text == (f"version: v1\nsharing:\n  {section}:\n    renameByDefault: true\n    resources:\n"
                    "      - name: nvidia.com/gpu\n        replicas: 4\n")


def test_no_device_plugin_config_for_whole_gpus_or_a_unit_of_several_replicas(flavor, db):
    assert nodes.device_plugin_config(flavor) is None
    assert nodes.device_plugin_config(shared_flavor(fraction_numerator=2, fraction_denominator=3)) is None


def test_the_shared_presets_tolerate_the_shared_pools_taint():
    for preset in catalog.PRESETS:
        shared = preset.sharing_mode in (Flavor.SharingMode.TIME_SLICED, Flavor.SharingMode.MPS, Flavor.SharingMode.VGPU)
        assert (catalog.SHARED_TAINT in preset.tolerations) is shared
        if shared and preset.sharing_mode != Flavor.SharingMode.VGPU:  # HAMi's split is its own config, not GFD's
            assert Fraction(1, int(preset.node_labels[nodes.REPLICAS_LABEL])) == preset.fraction


def test_the_launch_form_marks_a_flavor_whose_nodes_disagree_and_its_hint_says_why(
        simulated, ready_team, member, training, flavor):
    simulated.expect_nodes([NodeSpec(name="h100-0", labels={**flavor.node_labels, **TIME_SLICED_4},
                                     allocatable={flavor.resource_name: 32})])
    nodes.check_flavors()
    client = login(member)
    query = f"?team={ready_team.slug}&template={training.pk}&flavor={flavor.slug}"
    page = client.get(reverse("jobs:workload-launch") + query).content.decode()
    assert "H100 80GB — 1 GPU per unit · not launchable now: its nodes disagree with it" in page
    filled = "&units=1&p_epochs=10&p_learning_rate=0.001&p_image_tag=2.5&p_mixed_precision=on"
    hint = client.get(reverse("jobs:launch-hint") + query + filled).content.decode()
    assert 'data-testid="hint-verdict"' in hint and "Node h100-0 shares each GPU 4 ways" in hint


def test_an_mps_flavor_says_the_memory_and_compute_each_unit_is_capped_at(db):
    mps = shared_flavor(sharing_mode=Flavor.SharingMode.MPS, gpu_model="NVIDIA A10", slug="a10-mps", name="A10 MPS")
    assert mps.isolation.endswith("Each unit is capped at 6 GiB of the GPU's memory and 25 % of its compute.")
    assert "capped at" not in shared_flavor().isolation  # time-slicing caps nothing
