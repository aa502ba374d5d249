"""The registry of workload kinds: every kind the portal runs, by name, each declared whole in one
module of this package against `jobs.kinds.base.Kind` (as Kueue keeps its job-framework
integrations). Code anywhere else asks here what a kind builds, owns, means or allows, and never
compares a kind's name; adding a kind is a module here, its line in KINDS, and a migration for
the templates' choices."""

from __future__ import annotations

from typing import Any

from jobs import manifests
from jobs.kinds import distributed, inference, mpi, notebook, training, workspace
from jobs.kinds.base import Kind as Kind  # the interface, for annotations elsewhere
from portal.metrics.simulated import TelemetryProfile
from tenants import queueing
from tenants.manifests import KindReach
from tenants.queueing.base import QueuedWorkload

KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    training.KIND, distributed.KIND, inference.KIND, notebook.KIND, workspace.KIND, mpi.KIND)}


def get(name: str) -> Kind:
    """The kind of that name; one no module declares is a ValueError (a template's stored kind is one)."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown workload kind {name!r}") from None


def known(name: str) -> bool:
    return name in KINDS


def refusal(name: str) -> str:
    """Why a workload of that kind cannot run on the site's queue backend; empty when it can."""
    kind, backend = get(name), queueing.backend()
    if not kind.queues or backend.name in kind.queues:
        return ""
    return (f"{kind.plural[:1].upper()}{kind.plural[1:]} run only where the site's queue backend is "
            f"{' or '.join(queueing.BACKENDS[queue]().label for queue in kind.queues)}; this site runs {backend.label}.")


def runnable() -> tuple[str, ...]:
    """The names of the kinds the site's queue backend runs."""
    return tuple(name for name in KINDS if not refusal(name))


def choices() -> list[tuple[str, str]]:
    """(name, label) of every kind, in the registry's order: the models' and forms' choices."""
    return [(kind.name, kind.label) for kind in KINDS.values()]


def names(**facts: Any) -> tuple[str, ...]:
    """The names of the kinds whose declared facts equal these, e.g. names(serves_http=True)."""
    return tuple(name for name, kind in KINDS.items() if all(getattr(kind, fact) == value for fact, value in facts.items()))


def owner_of(kind: Kind) -> tuple[str, str]:
    """The (apiVersion, kind) that owns a kind's pods on the site's queue backend: the kind's own
    owner, or the queue's job object the backend makes of it (a Volcano Job for a batch Job)."""
    return queueing.backend().owner(kind.owner)


def owner_kinds() -> tuple[tuple[str, str], ...]:
    """Every (apiVersion, kind) that owns the pods of a kind the site's queue backend runs, each
    once, in the registry's order."""
    return tuple(dict.fromkeys(owner_of(KINDS[name]) for name in runnable()))


def words(names_: tuple[str, ...], *, nouns: bool = False) -> str:
    """Kinds named in a sentence by their plural ("inference and notebooks"), or by their nouns
    ("inference servers and notebooks")."""
    plurals = [f"{KINDS[name].noun}s" if nouns else KINDS[name].plural for name in names_]
    return " and ".join(plurals) if len(plurals) < 3 else f"{', '.join(plurals[:-1])} and {plurals[-1]}"


def telemetry(name: str) -> TelemetryProfile | None:
    """The simulated door's profile for pods of that kind (None: not a kind of the portal's)."""
    kind = KINDS.get(name)
    return kind.telemetry if kind is not None else None


def network_reach() -> KindReach:
    """Which kinds' pods the team's network policies open to the ingress controller and to the portal."""
    return KindReach(serving=names(serves_http=True), portal_reached=names(portal_reaches=True))


def workload_objects(*, spec: manifests.WorkloadSpec) -> list[dict[str, Any]]:
    """Every object of the workload, in the order to create them (its claim template first, the
    queued one last), as the site's queue backend runs them."""
    kind = get(spec.kind)
    if problem := refusal(spec.kind):
        raise ValueError(problem)  # jobs.services refuses it first, in the form's or the API's words
    queued = QueuedWorkload(name=spec.name, namespace=spec.namespace, team_queue=spec.team_queue, flavor=spec.flavor,
                            pods_together=spec.workers + kind.companion_pods if kind.starts_together else 1,
                            priority_class=f"gpu-portal-{spec.priority}", labels=spec.labels)
    return queueing.backend().shape([*manifests.claim_templates(spec), *kind.build(spec)], workload=queued)
