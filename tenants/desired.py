"""The desired state of the cluster, read from the database as plain specs for tenants/manifests.py.

manifests.py stays pure (no Django); this module is its only bridge to the models. Reconcile
applies what these return, and a team's deletion is pictured from them before it is confirmed;
the simulated cluster's nodes are made from the same catalog.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from portal.hooks import Hook
from portal.metrics import simulated as simulated_metrics
from tenants import catalog, manifests, selectors
from tenants.models import Department, Flavor, Membership, QuotaGrant, Team, current_pool_prefetch
from tenants.nodes import GPU_COUNT_LABEL, REPLICAS_LABEL, SHARING_STRATEGY_LABEL, STRATEGY_OF_MODE
from tenants.queueing import backend

# Which teams' queues are held (admit nothing new; the queue backend says how): billing's hard
# stop answers (portal.hooks).
HoldProvider = Callable[[list[int]], set[int]]
HOLDS = Hook[HoldProvider]("tenants.desired.HOLDS", by="billing")
# Which workload kinds serve HTTP and are reached by the portal: jobs' kinds say (portal.hooks).
WORKLOAD_KINDS = Hook[Callable[[], manifests.KindReach]]("tenants.desired.WORKLOAD_KINDS", by="jobs")
# Per team id, the queues its unfinished work waits or runs in (jobs' `Workload.queue_name`): a
# person's queue stays while their work is in it, member or not.
QUEUES_IN_USE = Hook[Callable[[list[int]], "dict[int, set[str]]"]]("tenants.desired.QUEUES_IN_USE", by="jobs")


def flavor_spec(flavor: Flavor) -> manifests.FlavorSpec:
    return manifests.FlavorSpec(
        name=flavor.slug, resource_name=flavor.resource_name, capacity=flavor.capacity_units,
        node_labels=dict(flavor.node_labels), tolerations=tuple(flavor.tolerations), resources=flavor.unit_resources,
        device_class=flavor.device_class_name, cpu_only=flavor.is_cpu,
    )


def network_spec() -> manifests.NetworkSpec:
    """The settings' network policy for every team, checked as the builders will use it: a
    malformed network, or one inside the cloud metadata address, is a configuration error (the
    tenants app asks at start, so a site never runs with it)."""
    spec = manifests.NetworkSpec(
        portal_namespace=settings.PORTAL_NAMESPACE,
        portal_pod_labels=tuple(settings.PORTAL_POD_LABELS),
        dns_namespace=settings.PORTAL_DNS_NAMESPACE,
        dns_pod_labels=tuple(settings.PORTAL_DNS_POD_LABELS),
        internet=settings.PORTAL_EGRESS_INTERNET == "on",
        exclude_private=settings.PORTAL_EGRESS_EXCLUDE_PRIVATE,
        cidrs=tuple(settings.PORTAL_EGRESS_ALLOW_CIDRS),
        namespaces=tuple(settings.PORTAL_EGRESS_ALLOW_NAMESPACES),
    )
    try:
        manifests.egress_allowance(network=spec)
    except ValueError as error:
        raise ImproperlyConfigured(f"PORTAL_EGRESS_ALLOW_CIDRS: {error}") from None
    return spec


def team_specs(team_ids: Iterable[int] | None = None) -> dict[int, tuple[Team, manifests.TeamSpec]]:
    """The desired state of the given teams (all when None), read in eight queries (teams, flavors,
    grants, members with cluster identities, held queues, departments, people, queues in use)."""
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=list(team_ids))
    teams_by_id = {team.pk: team for team in teams}
    active = list(Flavor.objects.filter(is_active=True).order_by("pk"))
    flavors = [flavor_spec(f) for f in active]
    flavor_ids = {f.slug: f.pk for f in active}
    guarantees = selectors.guarantees_by_flavor(team_ids=list(teams_by_id))
    subjects = cluster_subjects(team_ids=list(teams_by_id))
    held = HOLDS.call(list(teams_by_id))
    cohorts: dict[int | None, str] = {department.pk: department.cohort for department in Department.objects.all()}
    specs = {}
    network = network_spec()
    reader = portal_reader()
    gate = gate_service()
    reach = WORKLOAD_KINDS.call()
    cpu_pools = [f for f in active if f.is_cpu]
    people = team_people(team_ids=list(teams_by_id))
    for team in teams_by_id.values():
        # The namespace's CPU and memory backstops cover the GPU workloads' pods; a CPU-only
        # guarantee comes on top (no queue bounds it), so its units are never refused there.
        pooled = [(f, max(guarantees.get((team.pk, f.pk), 0), 0)) for f in cpu_pools]
        cores = team.cpu_limit_cores + sum(units * f.resource_per_unit for f, units in pooled)
        memory_gib = team.memory_limit_gib + sum(units * f.memory_gib_per_unit for f, units in pooled)
        specs[team.pk] = (team, manifests.TeamSpec(
            slug=team.slug,
            uid=str(team.uid),
            adopts_unannotated=team.adopts_unannotated,
            name_prefix=settings.PORTAL_NAMESPACE_PREFIX,
            quotas=tuple(
                manifests.FlavorQuota(flavor=f, nominal=max(guarantees.get((team.pk, flavor_ids[f.name]), 0), 0))
                for f in flavors
            ),
            subjects=tuple(sorted(subjects[team.pk])),
            policy=manifests.TeamPolicy(
                may_borrow=team.may_borrow, lends_idle=team.lends_idle,
                weight=manifests.weight_quantity(team.fair_share_weight), cpu=str(cores), memory=f"{memory_gib}Gi",
                pods=team.pod_limit,
                workloads=settings.PORTAL_TEAM_MAX_WORKLOADS,
                storage=tuple(sorted((name, int(gib)) for name, gib in team.storage_quota.items())),
            ),
            cohort=cohorts.get(team.department_id, settings.PORTAL_COHORT),
            ingress_namespace=settings.PORTAL_INGRESS_NAMESPACE,
            network=network,
            user_prefix=settings.KUBE_OIDC_USERNAME_PREFIX,
            member_role=settings.PORTAL_MEMBER_CLUSTER_ROLE,
            held=team.pk in held,
            people=people.get(team.pk, ()),
            portal_reader=reader,
            kinds=reach,
            gate_service=gate,
        ))
    return specs


def team_people(*, team_ids: list[int]) -> dict[int, tuple[str, ...]]:
    """Per team, the queues of its people where the backend gives each person one (Kueue): every
    member's, and those still holding someone's unfinished work (a member since removed, a platform
    admin who launched into the team), in name order."""
    queue = backend()
    if not queue.people_ordered:
        return {}
    names: dict[int, set[str]] = defaultdict(set)
    for team_id, user_id in Membership.objects.filter(team_id__in=team_ids).values_list("team_id", "user_id"):
        names[team_id].add(queue.person_queue(user_id))
    for team_id, in_use in QUEUES_IN_USE.call(team_ids).items():
        names[team_id].update(name for name in in_use if name)
    return {team_id: tuple(sorted(found)) for team_id, found in names.items()}


def gate_service() -> tuple[str, str] | None:
    """The portal's Service that workload routes' ExternalAuth filter names, when the site routes
    through a Gateway with the filter."""
    service = settings.PORTAL_GATEWAY_AUTH_SERVICE
    if settings.PORTAL_ENDPOINT_ROUTES != "gateway" or service is None:
        return None
    return service[0], service[1]


def portal_reader() -> manifests.PortalReader | None:
    """The portal's own binding in each team namespace, when its reads are namespaced."""
    if not settings.PORTAL_NAMESPACED_READS:
        return None
    return manifests.PortalReader(cluster_role=settings.PORTAL_TEAM_NAMESPACE_ROLE,
                                  service_account=settings.PORTAL_SERVICE_ACCOUNT, namespace=settings.PORTAL_NAMESPACE)


def cluster_subjects(*, team_ids: list[int]) -> dict[int, list[str]]:
    """Per team, what the API server calls each of its active members who sign in through the
    identity provider: the KUBE_OIDC_USERNAME_CLAIM of their identity ("sub": the subject the
    provider never reassigns; "email": their address). A local account has no cluster identity,
    and a deactivated one keeps its memberships (reactivating restores them) but loses its access
    to the namespace at once. With KUBE_OIDC_ISSUER set, only that issuer's subjects are the
    API server's to recognise."""
    memberships = Membership.objects.filter(team_id__in=team_ids, user__is_active=True, user__sso_identity__isnull=False)
    if settings.KUBE_OIDC_ISSUER:
        memberships = memberships.filter(user__sso_identity__issuer=settings.KUBE_OIDC_ISSUER)
    claim = "user__email" if settings.KUBE_OIDC_USERNAME_CLAIM == "email" else "user__sso_identity__subject"
    subjects: dict[int, list[str]] = defaultdict(list)
    for team_id, subject in memberships.values_list("team_id", claim):
        if subject:
            subjects[team_id].append(subject)
    return subjects


def department_specs() -> tuple[manifests.DepartmentSpec, ...]:
    """Every department, as a cohort under the portal's."""
    return tuple(manifests.DepartmentSpec(cohort=d.cohort, parent=settings.PORTAL_COHORT,
                                          borrowing_limit=d.borrowing_limit, lending_limit=d.lending_limit,
                                          weight=manifests.weight_quantity(d.fair_share_weight),
                                          pool=tuple((row.flavor.slug, row.units) for row in d.pool_in_force()))
                 for d in Department.objects.order_by("slug").prefetch_related(
                     current_pool_prefetch()))


def platform_objects() -> list[dict[str, Any]]:
    queue = backend()
    return manifests.make_platform_objects(
        flavors=tuple(flavor_spec(f) for f in Flavor.objects.filter(is_active=True).order_by("pk")), queue=queue,
        departments=department_specs() if queue.departments else (),
    )


def team_objects(spec: manifests.TeamSpec) -> list[dict[str, Any]]:
    """The team's objects as the site's queue backend makes its queue."""
    return manifests.make_team_objects(team=spec, queue=backend())


@dataclass(frozen=True)
class TeamDeletion:
    team: Team
    cluster_objects: list[tuple[str, str]]  # (kind, name) of what the portal made for the team, namespace first
    portal_records: list[str]  # sentences: what goes from the portal's database
    stays: list[str]  # sentences: what outlives the team


def team_deletion_picture(*, team: Team) -> TeamDeletion:
    """What the confirmation of a team's deletion lists: the team's cluster objects as the reconcile
    would make them (the namespace takes every workload in it along), the portal's records that go
    with the team, and what stays."""
    _, spec = team_specs([team.pk])[team.pk]
    objects = [(obj["kind"], obj["metadata"]["name"]) for obj in team_objects(spec)]
    members = team.memberships.count()
    grants = QuotaGrant.objects.active().filter(team=team).count()
    records = [f"{members} membership{'s' if members != 1 else ''}",
               f"{grants} active quota grant{'s' if grants != 1 else ''} (their units go back to the cluster)",
               "its quota requests"]
    for lines in selectors.TEAM_RECORDS_GOING.collect(team):
        records.extend(lines)
    stays = [line for lines in selectors.TEAM_RECORDS_STAYING.collect(team) for line in lines]
    stays.append("The audit trail, this deletion included")
    return TeamDeletion(team=team, cluster_objects=objects, portal_records=records, stays=stays)


GPUS_PER_SIMULATED_NODE = 8


def simulated_nodes() -> list[dict[str, Any]]:
    """The simulated cluster's nodes, made from the catalog: 8 physical GPUs a node, each
    split into as many units as the flavor's fraction says (7 MIG slices, 4 shared...). Each
    node says what one unit of its GPUs holds and draws at most (`catalog.unit_limits` of the
    flavor's model), so the simulated telemetry draws a T4 as a T4, and advertises each resource
    a unit asks for (a cGPU node its GiB and its percent of compute). A time-sliced or MPS pool
    carries GPU Feature Discovery's sharing labels, as a real one does (tenants/nodes.py checks them),
    and each pool the taints its flavor tolerates."""
    nodes = []
    for flavor in Flavor.objects.filter(is_active=True).order_by("pk"):
        if flavor.is_cpu:
            nodes += _simulated_cpu_nodes(flavor)
            continue
        per_node = GPUS_PER_SIMULATED_NODE * flavor.fraction_denominator // flavor.fraction_numerator
        count = -(-flavor.capacity_units // per_node)
        unit = catalog.unit_limits(gpu_model_name=flavor.gpu_model, resource_name=flavor.resource_name,
                                   fraction=flavor.fraction)
        hardware = {simulated_metrics.UNIT_MEMORY_LABEL: str(unit.memory_mib),
                    simulated_metrics.UNIT_MILLIWATTS_LABEL: str(unit.milliwatts)}
        if flavor.sharing_mode == Flavor.SharingMode.VGPU:  # a vGPU layer splits each card by its own config
            hardware[simulated_metrics.UNITS_PER_CARD_LABEL] = str(flavor.fraction_denominator // flavor.fraction_numerator)
        strategy = STRATEGY_OF_MODE.get(flavor.sharing_mode)
        replicas = flavor.fraction_denominator // flavor.fraction_numerator
        for index in range(count):
            units = min(per_node, flavor.capacity_units - index * per_node)
            sharing = ({SHARING_STRATEGY_LABEL: strategy, REPLICAS_LABEL: str(replicas),
                        GPU_COUNT_LABEL: str(-(-units // replicas))} if strategy else {})
            nodes.append({
                "name": f"sim-{flavor.slug}-{index}",
                "labels": {**sharing, **flavor.node_labels, **hardware},
                # A flavor claimed through a DeviceClass: its driver (named as the class, as NVIDIA's
                # DRA driver names its classes) publishes the node's devices instead.
                "allocatable": {} if flavor.device_class_name else catalog.quota_amounts(flavor.unit_resources, units),
                "devices": {flavor.device_class_name: units} if flavor.device_class_name else {},
                "taints": _taints_tolerated(flavor.tolerations),
            })
    return nodes


CPUS_PER_SIMULATED_NODE, GIB_PER_SIMULATED_NODE = 64, 512


def _simulated_cpu_nodes(flavor: Flavor) -> list[dict[str, Any]]:
    """A CPU-only flavor's pool: nodes of 64 cores and 512 GiB, as many as its units need."""
    per_node = max(min(CPUS_PER_SIMULATED_NODE // flavor.resource_per_unit,
                       GIB_PER_SIMULATED_NODE // max(flavor.memory_gib_per_unit, 1)), 1)
    nodes = []
    for index in range(-(-flavor.capacity_units // per_node)):
        units = min(per_node, flavor.capacity_units - index * per_node)
        cores, gib = flavor.cpu_and_memory(units)
        nodes.append({"name": f"sim-{flavor.slug}-{index}", "labels": dict(flavor.node_labels),
                      "allocatable": {"cpu": cores, "memory": f"{gib}Gi"}, "devices": {},
                      "taints": _taints_tolerated(flavor.tolerations)})
    return nodes


def _taints_tolerated(tolerations: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """The taints a pool carries so that only its flavor's pods land there: one per toleration
    that names a key and an effect (a toleration of everything taints nothing)."""
    return [{"key": t["key"], "value": t.get("value") or "present", "effect": t["effect"]}
            for t in tolerations if t.get("key") and t.get("effect") in ("NoSchedule", "NoExecute")]
