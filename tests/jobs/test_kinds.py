"""The registry of workload kinds (jobs/kinds/): one module per kind, asked by everything else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs import kinds
from jobs.kinds import base
from jobs.manifests import WorkloadSpec
from jobs.models import Workload, WorkloadKind
from portal.metrics import simulated
from tenants.manifests import WORKLOAD_KIND_LABEL

ROOT = Path(__file__).resolve().parents[2]
SPEC = WorkloadSpec(workload_id=7, name="wl-7", namespace="vision", team="vision", kind="training", image="busybox",
                    command=(), args=(), env=(), gpu=(("nvidia.com/gpu", 1),), port=8080)


def test_the_kinds_templates_may_choose_are_the_registrys_in_its_order():
    assert WorkloadKind.choices == [(kind.name, kind.label) for kind in kinds.KINDS.values()]
    assert list(kinds.KINDS) == ["training", "distributed", "inference", "notebook", "workspace", "mpi"]


def test_the_phases_kinds_derive_are_the_workloads_phases():
    derived = {base.QUEUED, base.ADMITTED, base.RUNNING, base.SUCCEEDED, base.FAILED, base.PREEMPTED}
    assert derived <= set(Workload.Phase.values)


@pytest.mark.parametrize("name", list(kinds.KINDS))
def test_each_kind_builds_its_declared_owner_last_and_labels_its_pods_with_its_name(name, settings):
    kind = kinds.get(name)
    if kind.queues:  # on a queue backend that runs it
        settings.PORTAL_QUEUE_BACKEND = kind.queues[0]
    objects = kinds.workload_objects(spec=WorkloadSpec(**{**SPEC.__dict__, "kind": name}))
    owner = objects[-1] if not kind.serves_http else next(o for o in objects if (o["apiVersion"], o["kind"]) == kind.owner)
    assert (owner["apiVersion"], owner["kind"]) == kinds.owner_of(kind) and kinds.owner_of(kind) in kinds.owner_kinds()
    pods = [task["template"] for task in owner["spec"].get("tasks") or []] or [owner["spec"]["template"]]
    assert {pod["metadata"]["labels"][WORKLOAD_KIND_LABEL] for pod in pods} == {name}


def test_an_unknown_kind_is_refused_in_words():
    with pytest.raises(ValueError, match="unknown workload kind 'ray'"):
        kinds.get("ray")
    assert not kinds.known("ray")


def test_the_facts_read_by_name_answer_what_the_pages_said_before():
    assert kinds.names(serves_http=True) == ("inference", "notebook", "workspace")
    assert kinds.names(runs_to_completion=True) == ("training", "distributed", "mpi")
    assert kinds.names(has_token=True) == ("notebook", "workspace")
    assert kinds.words(kinds.names(serves_http=True)) == "inference, notebooks and VS Code workspaces"
    assert kinds.words(kinds.names(scalable=True), nouns=True) == "inference servers"


def test_the_simulated_door_draws_each_kind_by_the_profile_its_module_declares():
    assert simulated.KIND_PROFILES.call("notebook") == kinds.get("notebook").telemetry
    assert simulated.KIND_PROFILES.call("inference") == simulated.TelemetryProfile("daily", 0.62)
    assert simulated.KIND_PROFILES.call("something-else") is None


def test_the_network_policies_reach_the_kinds_that_say_they_serve_or_are_asked():
    reach = kinds.network_reach()
    # The portal asks notebooks and workspaces how idle they are, and inference servers its Try it questions.
    assert (reach.serving, reach.portal_reached) == (("inference", "notebook", "workspace"),
                                                     ("inference", "notebook", "workspace"))


# A kind's name compared in code or a page: what the registry answers instead.
KIND_BRANCH = re.compile(
    r"""kind\s*(==|!=)\s*["'](training|distributed|inference|notebook|workspace|mpi)["']|WorkloadKind\.[A-Z]""")


def test_no_code_or_page_outside_the_kind_modules_branches_on_a_kinds_name():
    sources = [*ROOT.glob("jobs/**/*.py"), *ROOT.glob("tenants/**/*.py"), *ROOT.glob("portal/**/*.py"),
               *ROOT.glob("billing/**/*.py"), *ROOT.glob("templates/**/*.html")]
    branches = [f"{path.relative_to(ROOT)}:{number}" for path in sources if "kinds" not in path.parts
                and "migrations" not in path.parts
                for number, line in enumerate(path.read_text().splitlines(), start=1) if KIND_BRANCH.search(line)]
    assert branches == []
