"""What the contract scenarios share: probes of the cluster through the gateway, a suspended
Job for the team's queue, and launching through the portal's own services."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs import kinds, manifests, sync
from jobs import services as job_services
from jobs.models import Workload
from portal.kube import ObjectRef, gateway
from tenants import cluster_selectors
from tenants.queueing.kueue import KUEUE

TEAM_KINDS = [("v1", "Namespace"), ("v1", "ResourceQuota"), ("v1", "LimitRange"), ("networking.k8s.io/v1", "NetworkPolicy"),
              ("rbac.authorization.k8s.io/v1", "RoleBinding"), (KUEUE, "ClusterQueue"), (KUEUE, "LocalQueue")]

def metered(team: Any, *, start: dt.datetime, until: dt.datetime) -> Any:
    """The team's figures from metering's own rows of [start's hour, until): the intervals and the
    rate card alone decide them, folded by the one rule every page uses (billing.figures)."""
    from billing import metering
    from billing.figures import Lines
    from billing.models import Account, Rate
    from billing.periods import hour_floor

    keyed = metering.usage_rows(metering.Window(hour_floor(start), until), until=until)
    account, rates = Account.for_team(team), {rate.pk: rate for rate in Rate.objects.all()}
    rows: list[dict[str, Any]] = [
        {"account_id": account_id, "flavor_id": flavor_id, "rate_id": rate_id, "borrowed": borrowed,
         "rate__price_per_gpu_hour": rates[rate_id].price_per_gpu_hour if rate_id else None, "rate__currency": "USD",
         "rate__borrowed_discount_percent": rates[rate_id].borrowed_discount_percent if rate_id else 0,
         "fraction_numerator": numerator, "fraction_denominator": denominator, "unit_seconds": unit_seconds}
        for (_, account_id, flavor_id, _, _, borrowed, rate_id, numerator, denominator), unit_seconds in keyed.items()
        if account_id == account.pk]
    return Lines(rows, currency="USD"), rows


HOLD = {"kwok.gpu-portal.test/outcome": "Running", "gpu-portal.io/simulated-run-seconds": "100000"}
# The kinds a Kueue site runs (an MPI job needs Volcano: tests/contract/test_mpi_contract.py).
KUEUE_KINDS = tuple(name for name, kind in kinds.KINDS.items() if not kind.queues or "kueue" in kind.queues)
QUICK = {"kwok.gpu-portal.test/run-duration": "2s", "gpu-portal.io/simulated-run-seconds": "2"}



def wait_for_quota_status(cluster, namespace: str) -> None:
    """Pods are refused until a new namespace's ResourceQuota has status (real clusters)."""
    ref = ObjectRef("v1", "ResourceQuota", "gpu-portal", namespace)
    cluster.wait_for(lambda: (cluster.gateway.get(ref) or {}).get("status", {}).get("hard"),
                     what=f"the ResourceQuota of {namespace} to get status")


def existing(ref: ObjectRef) -> dict[str, Any]:
    """The object the scenario expects to be there; its absence fails the test by name."""
    obj = gateway().get(ref)
    assert obj is not None, f"{ref} is not in the cluster"
    return obj


def nominal(cq: dict[str, Any], flavor: str) -> str:
    for group in cq["spec"]["resourceGroups"]:
        for fq in group["flavors"]:
            if fq["name"] == flavor:
                return fq["resources"][0]["nominalQuota"]
    raise AssertionError(f"{flavor} not in {cq['metadata']['name']}")


def team_objects(slug: str) -> set[tuple[str, str, str | None]]:
    found = set()
    for api_version, kind in TEAM_KINDS:
        for item in gateway().list(api_version, kind, labels={"gpu-portal.io/team": slug})[0]:
            found.add((kind, item["metadata"]["name"], item["metadata"].get("namespace")))
    return found


def probe_job(
    namespace: str, name: str, *, gpus: int, priority: str = "gpu-portal-normal", run: str = "forever"
) -> dict[str, Any]:
    """A suspended Job for the team's LocalQueue that satisfies Pod Security `restricted`."""
    annotations = {"gpu-portal.io/simulated-run-seconds": "100000" if run == "forever" else run,
                   "kwok.gpu-portal.test/outcome": "Running" if run == "forever" else "Succeeded",
                   "kwok.gpu-portal.test/run-duration": "1s" if run == "forever" else f"{run}s"}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": priority}},
        "spec": {
            "suspend": True, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "main", "image": "busybox:1.36", "command": ["true"],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)},
                                      "limits": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)}},
                    }],
                },
            },
        },
    }


def workload_of(namespace: str, job: str) -> dict[str, Any] | None:
    for workload in gateway().list(KUEUE, "Workload", namespace=namespace)[0]:
        owners = workload["metadata"].get("ownerReferences", [])
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return workload
    return None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions", []):
        if cond["type"] == type_:
            return cond
    return {}


def is_admitted(namespace: str, job: str) -> bool:
    return condition(workload_of(namespace, job), "QuotaReserved").get("status") == "True" and \
        not (gateway().get(ObjectRef("batch/v1", "Job", job, namespace)) or {"spec": {"suspend": True}})["spec"].get("suspend")


def waits_for_quota(namespace: str, job: str) -> str:
    reserved = condition(workload_of(namespace, job), "QuotaReserved")
    message: str = reserved.get("message", "")
    return message if reserved.get("status") == "False" and "insufficient unused quota" in message else ""


def queue_usage(slug: str, flavor: str) -> tuple[int, int]:
    for row in cluster_selectors.cluster_queue_usage(slugs=[slug]).get(slug, []):
        if row.flavor == flavor:
            return row.in_use, row.borrowed
    return 0, 0


def launch(team, user, template, flavor, capture, **kwargs) -> Workload:
    with capture(execute=True):
        workload = job_services.workload_launch(user=user, request=job_services.LaunchRequest(
            team=team, template=template, flavor=flavor, **kwargs))
    workload.refresh_from_db()
    return workload


def pods_of(workload: Workload) -> list[dict[str, Any]]:
    return gateway().list("v1", "Pod", namespace=workload.team.namespace,
                          labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]


def phase_of(workload: Workload) -> str:
    """The workload's phase after a sync."""
    sync.sync_all()
    workload.refresh_from_db()
    return workload.phase


def queued_for_quota(workload: Workload) -> bool:
    """Queued, and the queue has tried it and said it lacks quota (not merely not seen it yet)."""
    return phase_of(workload) == Workload.Phase.QUEUED and workload.reason.startswith("Waiting for quota")


def running(workload: Workload) -> bool:
    """The workload reads running and every one of its pods is bound to a node."""
    sync.sync_all()
    workload.refresh_from_db()
    return workload.phase == Workload.Phase.RUNNING and all(p["spec"].get("nodeName") for p in pods_of(workload))
