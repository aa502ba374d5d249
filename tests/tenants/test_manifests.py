"""The builders, compared as whole manifests, and validated offline against the schemas of the
pinned Kubernetes (kubernetes-validate) and Kueue (the CRDs in deploy/kueue/crds)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tenants import manifests as m
from tenants.catalog import UnitResource, pod_requests
from tenants.queueing import kueue

KUBERNETES_VERSION = "1.36.0"
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "kueue" / "crds"

H100 = m.FlavorSpec(
    name="h100-80gb", resource_name="nvidia.com/gpu", capacity=32,
    node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
)
MIG = m.FlavorSpec(name="a100-1g-10gb", resource_name="nvidia.com/mig-1g.10gb", capacity=56,
                   node_labels={"nvidia.com/mig.config": "all-1g.10gb"})
A100 = m.FlavorSpec(name="a100-80gb", resource_name="nvidia.com/gpu", capacity=16, node_labels={"gpu": "a100"})

UID = "8d5c2b1e-6f0a-4b7e-9c3d-2a1f0e9b8c7d"
QUEUE = kueue.KueueBackend()  # the objects' queue part, Kueue's (tenants/queueing/kueue.py)
TEAM = m.TeamSpec(
    slug="vision", uid=UID,
    quotas=(m.FlavorQuota(flavor=H100, nominal=8), m.FlavorQuota(flavor=MIG, nominal=0), m.FlavorQuota(flavor=A100, nominal=2)),
    subjects=("9f3c1b7e-bob", "24a8e0d2-alice"),
    kinds=m.KindReach(serving=("inference", "notebook"), portal_reached=("notebook",)),
)
LABELS = {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/team": "vision"}
PROOF = {"gpu-portal.io/team-uid": UID}


def test_a_team_gets_ten_objects_in_creation_order():
    assert [(o["kind"], o["metadata"]["name"]) for o in m.make_team_objects(team=TEAM, queue=QUEUE)] == [
        ("Namespace", "vision"), ("ResourceQuota", "gpu-portal"), ("LimitRange", "gpu-portal"),
        ("NetworkPolicy", "gpu-portal-default-deny-ingress"), ("NetworkPolicy", "gpu-portal-default-deny-egress"),
        ("NetworkPolicy", "gpu-portal-allow-portal"), ("NetworkPolicy", "gpu-portal-allow-ingress-controller"),
        ("RoleBinding", "gpu-portal-members"), ("ClusterQueue", "vision"), ("LocalQueue", "default"),
    ]


def test_the_namespace_enforces_restricted_pod_security():
    assert m.make_namespace(team=TEAM) == {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "vision", "labels": {
            **LABELS,
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": "restricted",
        }, "annotations": PROOF},
    }


def test_the_cluster_queue_guarantees_the_grants_and_groups_flavors_by_resource():
    assert kueue.make_cluster_queue(team=TEAM) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": "vision", "labels": LABELS, "annotations": PROOF},
        "spec": {
            "cohortName": "gpu-portal",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "vision"}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                    {"name": "h100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]},
                    {"name": "a100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]},
                ]},
                {"coveredResources": ["nvidia.com/mig-1g.10gb"], "flavors": [
                    {"name": "a100-1g-10gb", "resources": [{"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0"}]},
                ]},
            ],
            "fairSharing": {"weight": "1"},
            "preemption": {
                "reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Never"}, "withinClusterQueue": "LowerPriority",
            },
            "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
        },
    }


def test_a_fair_share_weight_is_written_as_the_quantity_kueue_reads():
    assert [m.weight_quantity(Decimal(text)) for text in ("1.00", "3.00", "0.50", "0.00", "100.00", "2.25")] == [
        "1", "3", "0.5", "0", "100", "2.25"]
    team = replace(TEAM, policy=m.TeamPolicy(weight=m.weight_quantity(Decimal("0.50"))))
    assert kueue.make_cluster_queue(team=team)["spec"]["fairSharing"] == {"weight": "0.5"}


def test_a_team_that_may_not_borrow_or_lend_gets_zero_limits():
    team = m.TeamSpec(slug="vision", uid=UID, quotas=(m.FlavorQuota(flavor=H100, nominal=8),),
                      policy=m.TeamPolicy(may_borrow=False, lends_idle=False))
    resources = kueue.make_cluster_queue(team=team)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert resources == [{"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "0", "lendingLimit": "0"}]


def test_the_backstop_quota_bounds_cpu_memory_pods_and_objects_and_leaves_gpus_to_the_queue():
    """No GPU limit: a waiting server's gated replicas (Kueue) or a waiting workload's held pods
    (Volcano) count against a ResourceQuota, and a GPU limit there refused pods the queue had admitted."""
    assert m.make_resource_quota(team=TEAM) == {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "gpu-portal", "namespace": "vision", "labels": LABELS, "annotations": PROOF},
        "spec": {"hard": {
            "requests.cpu": "64", "requests.memory": "512Gi", "pods": "100",
            "count/jobs.batch": "200", "count/deployments.apps": "200", "count/statefulsets.apps": "200",
            "count/services": "200", "count/ingresses.networking.k8s.io": "200",
        }},
    }


CGPU = m.FlavorSpec(name="a10-cgpu-4", resource_name="aliyun.com/gpu-mem", capacity=32, node_labels={"gpu": "a10"},
                   resources=(UnitResource("aliyun.com/gpu-mem", 6), UnitResource("aliyun.com/gpu-core.percentage", 25)))
GPU_MEM = m.FlavorSpec(name="t4-gpu-mem", resource_name="aliyun.com/gpu-mem", capacity=128, node_labels={"gpu": "t4"})
HAMI = m.FlavorSpec(name="t4-vgpu-4", resource_name="nvidia.com/gpu", capacity=32, node_labels={"gpu": "on"},
                    resources=(UnitResource("nvidia.com/gpu"), UnitResource("nvidia.com/gpumem", 4096, per_device=True),
                               UnitResource("nvidia.com/gpucores", 25, per_device=True)))


def test_a_flavor_whose_unit_asks_for_several_resources_has_quota_on_each_in_one_group_with_its_neighbours():
    # cGPU's memory and compute go with the memory-only flavor (they share aliyun.com/gpu-mem);
    # HAMi's vGPU with the whole GPUs (they share nvidia.com/gpu). Each flavor lists every resource
    # its group covers, in the group's order, with no quota where its unit asks for none.
    team = m.TeamSpec(slug="vision", uid=UID, quotas=(
        m.FlavorQuota(flavor=H100, nominal=8), m.FlavorQuota(flavor=GPU_MEM, nominal=16), m.FlavorQuota(flavor=MIG, nominal=0),
        m.FlavorQuota(flavor=CGPU, nominal=4), m.FlavorQuota(flavor=HAMI, nominal=2)))
    groups = kueue.make_cluster_queue(team=team)["spec"]["resourceGroups"]

    def quota(name, resources, amounts):
        return {"name": name, "resources": [{"name": resource, "nominalQuota": amount}
                                            for resource, amount in zip(resources, amounts, strict=True)]}

    vgpu = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")
    cgpu = ("aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage")
    assert groups == [
        {"coveredResources": list(vgpu), "flavors": [
            quota("h100-80gb", vgpu, ("8", "0", "0")), quota("t4-vgpu-4", vgpu, ("2", "8192", "50"))]},
        {"coveredResources": list(cgpu), "flavors": [
            quota("t4-gpu-mem", cgpu, ("16", "0")), quota("a10-cgpu-4", cgpu, ("24", "100"))]},
        {"coveredResources": ["nvidia.com/mig-1g.10gb"], "flavors": [quota("a100-1g-10gb", ["nvidia.com/mig-1g.10gb"], ["0"])]},
    ]


def test_a_pod_writes_its_units_of_each_resource_or_once_what_the_plugin_reads_per_device():
    assert pod_requests(CGPU.unit_resources, 3) == {"aliyun.com/gpu-mem": 18, "aliyun.com/gpu-core.percentage": 75}
    assert pod_requests(HAMI.unit_resources, 3) == {"nvidia.com/gpu": 3, "nvidia.com/gpumem": 4096, "nvidia.com/gpucores": 25}
    assert pod_requests(H100.unit_resources, 2) == {"nvidia.com/gpu": 2}


def test_the_backstop_quota_counts_each_workload_kind_to_the_team_workload_limit():
    team = replace(TEAM, policy=m.TeamPolicy(workloads=3))
    hard = m.make_resource_quota(team=team)["spec"]["hard"]
    assert {key: value for key, value in hard.items() if key.startswith("count/")} == {
        "count/jobs.batch": "3", "count/deployments.apps": "3", "count/statefulsets.apps": "3",
        "count/services": "3", "count/ingresses.networking.k8s.io": "3",
    }


def test_members_may_read_their_pods_with_their_own_credentials_named_by_subject():
    assert m.make_role_binding(team=TEAM) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "gpu-portal-members", "namespace": "vision", "labels": LABELS, "annotations": PROOF},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:24a8e0d2-alice"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:9f3c1b7e-bob"},
        ],
    }


def test_a_team_without_sso_members_binds_nobody_under_the_prefix_the_api_server_uses():
    assert m.make_role_binding(team=replace(TEAM, subjects=()))["subjects"] == []
    unprefixed = m.make_role_binding(team=replace(TEAM, subjects=("24a8e0d2-alice",), user_prefix=""))
    assert unprefixed["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "24a8e0d2-alice"}]


READER = m.PortalReader(cluster_role="portal-gpu-portal-in-team-namespaces", service_account="portal-gpu-portal",
                        namespace="gpu-portal")


def test_with_namespaced_reads_the_portal_binds_its_own_account_right_after_the_namespace():
    team = replace(TEAM, portal_reader=READER)

    assert [(o["kind"], o["metadata"]["name"]) for o in m.make_team_objects(team=team, queue=QUEUE)][:3] == [
        ("Namespace", "vision"), ("RoleBinding", "gpu-portal-service-account"), ("ResourceQuota", "gpu-portal")]
    assert m.make_portal_role_binding(team=team, reader=READER) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "gpu-portal-service-account", "namespace": "vision", "labels": LABELS, "annotations": PROOF},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "portal-gpu-portal-in-team-namespaces"},
        "subjects": [{"kind": "ServiceAccount", "name": "portal-gpu-portal", "namespace": "gpu-portal"}],
    }


def test_without_namespaced_reads_no_team_binds_the_portals_account():
    assert not [o for o in m.make_team_objects(team=TEAM, queue=QUEUE) if o["metadata"]["name"] == "gpu-portal-service-account"]


def test_the_local_queue_points_at_the_team_queue():
    assert kueue.make_local_queue(team=TEAM) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "vision", "labels": LABELS, "annotations": PROOF},
        "spec": {"clusterQueue": "vision", "stopPolicy": "None"},
    }


def test_every_team_object_carries_the_managed_by_label_and_the_team_uid():
    for obj in m.make_team_objects(team=TEAM, queue=QUEUE):
        assert obj["metadata"]["labels"].items() >= LABELS.items(), obj["kind"]
        assert obj["metadata"]["annotations"] == PROOF, obj["kind"]


def test_the_name_prefix_names_the_namespace_and_the_queue_and_everything_that_points_at_them():
    team = m.TeamSpec(slug="vision", uid=UID, quotas=(m.FlavorQuota(flavor=H100, nominal=8),), name_prefix="gpu-")
    objects = {o["kind"]: o for o in m.make_team_objects(team=team, queue=QUEUE)}

    assert (team.namespace, team.cluster_queue) == ("gpu-vision", "gpu-vision")
    assert objects["Namespace"]["metadata"]["name"] == "gpu-vision"
    assert {o["metadata"].get("namespace") for o in objects.values()} == {None, "gpu-vision"}
    assert objects["ClusterQueue"]["metadata"]["name"] == "gpu-vision"
    assert objects["ClusterQueue"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "gpu-vision"}}
    assert objects["LocalQueue"]["spec"]["clusterQueue"] == "gpu-vision"
    assert objects["Namespace"]["metadata"]["labels"]["gpu-portal.io/team"] == "vision"


def _live(labels: dict, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision", "labels": labels,
                                                                   **({"annotations": annotations} if annotations else {})}}


def test_an_object_is_the_teams_only_with_the_managed_by_label_and_its_uid():
    assert m.owned_by_team(m.make_namespace(team=TEAM), uid=UID)
    assert m.owned_by_team(_live(LABELS, PROOF), uid=UID, slug="vision")


def test_another_teams_uid_is_no_proof_even_with_the_same_slug():
    assert not m.owned_by_team(_live(LABELS, {"gpu-portal.io/team-uid": "another-team"}), uid=UID, slug="vision")
    assert not m.owned_by_team(_live(LABELS, {"gpu-portal.io/team-uid": "another-team"}), uid=UID, slug="vision",
                               adopts_unannotated=True)


def test_a_namespace_someone_else_made_is_no_ones_proof():
    assert not m.owned_by_team(_live({"team": "monitoring"}), uid=UID, slug="vision")
    assert not m.owned_by_team(_live({}), uid="", slug="vision")
    # the uid copied without the portal's label proves nothing either
    assert not m.owned_by_team(_live({"gpu-portal.io/team": "vision"}, PROOF), uid=UID, slug="vision")


def test_labels_without_a_uid_count_only_for_a_team_from_before_the_uid():
    assert not m.owned_by_team(_live(LABELS), uid=UID, slug="vision")
    assert m.owned_by_team(_live(LABELS), uid=UID, slug="vision", adopts_unannotated=True)
    assert not m.owned_by_team(_live({**LABELS, "gpu-portal.io/team": "speech"}), uid=UID, slug="vision", adopts_unannotated=True)


def test_flavors_become_resource_flavors_with_their_placement():
    assert kueue.make_resource_flavor(flavor=H100) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {
            "name": "h100-80gb", "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/role": "flavor"},
        },
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }


def test_priority_tiers_exist_for_kueue_and_for_pods():
    objects = m.make_platform_objects(flavors=(H100,), queue=QUEUE)
    names = [(o["kind"], o["metadata"]["name"], o.get("value")) for o in objects]
    assert names == [
        ("ResourceFlavor", "h100-80gb", None),
        ("WorkloadPriorityClass", "gpu-portal-low", 100), ("WorkloadPriorityClass", "gpu-portal-normal", 1000),
        ("WorkloadPriorityClass", "gpu-portal-high", 10000),
        ("PriorityClass", "gpu-portal-low", 100), ("PriorityClass", "gpu-portal-normal", 1000),
        ("PriorityClass", "gpu-portal-high", 10000),
    ]


def test_pod_priority_classes_never_preempt_so_only_kueue_evicts_by_its_fair_rules():
    assert m.make_priority_class(tier=m.PRIORITY_TIERS[2]) == {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "gpu-portal-high",
                     "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/role": "priority"}},
        "value": 10000, "globalDefault": False,
        "description": "Deadlines and serving: may preempt lower tiers inside the team.",
        "preemptionPolicy": "Never",
    }
    pod_classes = [o for o in m.make_platform_objects(flavors=(H100,), queue=QUEUE) if o["kind"] == "PriorityClass"]
    assert [o["preemptionPolicy"] for o in pod_classes] == ["Never", "Never", "Never"]


def _crd_schema(kind: str) -> dict:
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
            return version["schema"]["openAPIV3Schema"]
    raise AssertionError(f"no CRD for {kind}")


def _strict(schema: dict) -> dict:
    """CRD schemas allow unknown fields only where they say so; make that explicit for jsonschema."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


RESEARCH = m.DepartmentSpec(cohort="gpu-portal-research", parent="gpu-portal", borrowing_limit=4, lending_limit=0,
                            weight="2.5")


def test_a_department_is_a_cohort_under_the_portals_whose_limits_bound_each_gpu_flavor():
    assert kueue.make_cohort(department=RESEARCH, flavors=(H100, MIG, A100)) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
        "metadata": {"name": "gpu-portal-research",
                     "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/role": "department"}},
        "spec": {"parentName": "gpu-portal", "fairSharing": {"weight": "2.5"}, "resourceGroups": [
            {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100-80gb", "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "4", "lendingLimit": "0"}]},
                {"name": "a100-80gb", "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "4", "lendingLimit": "0"}]},
            ]},
            {"coveredResources": ["nvidia.com/mig-1g.10gb"], "flavors": [
                {"name": "a100-1g-10gb", "resources": [
                    {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0", "borrowingLimit": "4", "lendingLimit": "0"}]},
            ]},
        ]},
    }
    # Without limits it only groups its teams: no quota of its own to write.
    free = replace(RESEARCH, borrowing_limit=None, lending_limit=None)
    assert kueue.make_cohort(department=free, flavors=(H100,))["spec"] == {"parentName": "gpu-portal",
                                                                          "fairSharing": {"weight": "2.5"}}
    # Only the limit set is written.
    lends_only = kueue.make_cohort(department=replace(RESEARCH, borrowing_limit=None), flavors=(H100,))
    assert lends_only["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "0", "lendingLimit": "0"}]
    # A pool is the cohort's nominal quota of the flavor, per resource its unit asks for; with no limits
    # only the pool is written, and a flavor it does not pool holds none.
    pooled = replace(RESEARCH, borrowing_limit=None, lending_limit=None, pool=(("a100-80gb", 3), ("a100-1g-10gb", 7)))
    groups = kueue.make_cohort(department=pooled, flavors=(H100, MIG, A100))["spec"]["resourceGroups"]
    assert [[(f["name"], f["resources"]) for f in group["flavors"]] for group in groups] == [
        [("h100-80gb", [{"name": "nvidia.com/gpu", "nominalQuota": "0"}]),
         ("a100-80gb", [{"name": "nvidia.com/gpu", "nominalQuota": "3"}])],
        [("a100-1g-10gb", [{"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "7"}])]]


def test_departments_come_after_the_flavors_and_a_team_in_one_joins_its_cohort():
    objects = m.make_platform_objects(flavors=(H100,), queue=QUEUE, departments=(RESEARCH,))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects][-4:] == [
        ("Cohort", "gpu-portal-research"), ("PriorityClass", "gpu-portal-low"), ("PriorityClass", "gpu-portal-normal"),
        ("PriorityClass", "gpu-portal-high")]
    in_research = replace(TEAM, cohort=RESEARCH.cohort)
    assert kueue.make_cluster_queue(team=in_research)["spec"]["cohortName"] == "gpu-portal-research"


ALL_OBJECTS = [*m.make_team_objects(team=replace(TEAM, portal_reader=READER), queue=QUEUE),
               *m.make_platform_objects(flavors=(H100, MIG, A100), queue=QUEUE, departments=(RESEARCH,))]


@pytest.mark.parametrize("obj", ALL_OBJECTS, ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_every_object_validates_against_the_pinned_schemas(obj):
    if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        schema = _strict(_crd_schema(obj["kind"]))
        schema["properties"]["metadata"] = {"type": "object"}
        jsonschema.validate(obj, schema)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_schema_validation_can_fail():
    broken = kueue.make_cluster_queue(team=TEAM)
    broken["spec"]["cohort"] = "v1beta1-spelling"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _strict(_crd_schema("ClusterQueue")) | {})
    with pytest.raises(kubernetes_validate.ValidationError):
        namespace = {**m.make_namespace(team=TEAM), "spec": {"finalizers": "x"}}
        kubernetes_validate.validate(namespace, KUBERNETES_VERSION, strict=True)


def test_a_held_team_s_local_queue_admits_nothing_new():
    held = replace(TEAM, held=True)
    assert kueue.make_local_queue(team=held)["spec"] == {"clusterQueue": "vision", "stopPolicy": "Hold"}


def test_each_person_queues_through_a_local_queue_of_their_own_held_with_the_team():
    people = replace(TEAM, people=("person-3", "person-7"), held=True)
    queues = [o for o in kueue.KueueBackend().team_objects(team=people) if o["kind"] == "LocalQueue"]
    assert [(q["metadata"]["name"], q["spec"]) for q in queues] == [
        (name, {"clusterQueue": "vision", "stopPolicy": "Hold"}) for name in ("default", "person-3", "person-7")]
    assert all(q["metadata"]["annotations"] == PROOF for q in queues)
    assert kueue.KueueBackend().person_queue(7) == "person-7"
    assert kueue.KueueBackend().workload_labels(priority="normal", queue="person-7")["kueue.x-k8s.io/queue-name"] == "person-7"
    assert kueue.KueueBackend().workload_labels(priority="normal")["kueue.x-k8s.io/queue-name"] == "default"
