"""The demo's site: three teams, a person for each role, a real cluster's GPU flavors, quota
requests in every state (the approved ones held since the history began), the default workload
templates with one that runs the user's own repository, and a data volume for each team."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction

from jobs import kinds, volumes
from jobs import services as job_services
from jobs.models import GitSource, ImageRegistry, TeamVolume, WorkloadTemplate
from portal.errors import DomainError
from portal.kube import KubeError, gateway
from portal.models import User
from tenants import catalog, reconcile, services
from tenants.models import Department, Flavor, Membership, QuotaRequest, Team
from tenants.queueing import backend

PASSWORD = "gpu-portal-demo"

FLAVORS: list[dict[str, Any]] = [
    dict(name="H100 80GB", slug="h100-80gb", resource_name="nvidia.com/gpu", sharing_mode="exclusive",
         gpu_model="NVIDIA H100 80GB HBM3", fraction_numerator=1, fraction_denominator=1, capacity_units=32,
         node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
         tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    dict(name="A100 1g.10gb", slug="a100-1g-10gb", resource_name="nvidia.com/mig-1g.10gb", sharing_mode="mig",
         gpu_model="NVIDIA A100 80GB PCIe", fraction_numerator=1, fraction_denominator=7, capacity_units=56,
         node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe", "nvidia.com/mig.config": "all-1g.10gb"},
         tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    dict(name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared", sharing_mode="time-sliced",
         gpu_model="NVIDIA Tesla T4", fraction_numerator=1, fraction_denominator=4, capacity_units=32,
         node_labels={"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/device-plugin.config": "time-sliced-4"},
         tolerations=[{"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}]),
]

TEAMS = [
    ("vision", "Computer Vision", "CC-4100", "Detection and segmentation models for the product line."),
    ("nlp", "Language Models", "CC-4200", "Fine-tuning and serving the assistant's language models."),
    ("recsys", "Recommendations", "CC-4300", "Ranking models for the storefront."),
]

# username, first, last, platform admin, finance, [(team, role)]
PEOPLE = [
    ("admin", "Ada", "Admin", True, False, []),
    ("finance", "Fin", "Ance", False, True, []),
    ("lena", "Lena", "Lead", False, False, [("vision", "lead")]),
    ("alice", "Alice", "Scientist", False, False, [("vision", "member")]),
    ("omar", "Omar", "Lead", False, False, [("nlp", "lead")]),
    ("bob", "Bob", "Scientist", False, False, [("nlp", "member"), ("vision", "member")]),
    ("rita", "Rita", "Lead", False, False, [("recsys", "lead")]),
    ("carol", "Carol", "Scientist", False, False, [("recsys", "member")]),
    ("hana", "Hana", "Head", False, False, []),  # heads AI Research (DEPARTMENT_HEAD)
]

# Where the demo's template fetches code from: all of GitHub, so whoever tries the demo can run a
# repository of their own (a site names its organisations, e.g. github.com/acme).
GIT_SOURCE = ("github.com", "Public repositories on GitHub: the demo lets anyone run their own code")
OWN_CODE_TEMPLATE = "train-from-git"
# Each team's data volume (a PersistentVolumeClaim in its namespace), offered by the launch form.
DATA_VOLUME, DATA_VOLUME_GIB = "datasets", 100
# Each demo team's storage quota: GiB its members' data volumes may ask for, of the demo's one class.
STORAGE_CLASS, TEAM_STORAGE_GIB = "standard", 500


def site_midnight(day: dt.date) -> dt.datetime:
    """The instant a day begins in the site's time zone: where temporary quota starts and stops
    (tenants.services dates a grant's last day so)."""
    return dt.datetime.combine(day, dt.time.min, tzinfo=ZoneInfo(settings.TIME_ZONE))


@transaction.atomic
def site_seed(*, now: dt.datetime, since: dt.datetime) -> None:
    """People, teams, flavors, quota and templates. The permanent grants, and the quota requests
    that gave them, date from `since` (the start of the seeded history), a temporary push from a
    few days ago, and an expired grant ran for most of the last three weeks: the history is
    metered against the quota the teams held at each moment."""
    users = people_seed()
    admin = users["admin"]
    flavors = {spec["slug"]: services.flavor_save(actor=admin, flavor=Flavor(**spec)) for spec in FLAVORS}
    teams = {
        slug: services.team_create(actor=admin, slug=slug, name=name, cost_center=cc, description=description,
                                   storage_quota={STORAGE_CLASS: TEAM_STORAGE_GIB})
        for slug, name, cc, description in TEAMS
    }
    for username, *_rest, roles in PEOPLE:
        for team_slug, role in roles:
            Membership.objects.create(team=teams[team_slug], user=users[username], role=role)
    departments_seed(admin=admin, teams=teams)
    asks = QuotaAsks(users=users, teams=teams, flavors=flavors, today=now.astimezone(ZoneInfo(settings.TIME_ZONE)).date())
    quota_history_seed(asks, since=since, now=now)
    two_levels_seed(admin=admin, head=users[DEPARTMENT_HEAD])  # from now on: the history was approved by the leads
    asks.ask("vision", "alice", [("a100-1g-10gb", 14)], "Notebooks for the new interns.", ends_in_days=30)
    asks.ask("nlp", "bob", [("t4-shared", 4), ("a100-1g-10gb", 7)], "Serving the small model for the demo.")
    templates_seed(admin=admin, flavors=flavors)
    asks.ask("recsys", "carol", [("h100-80gb", 4)], "Trying a transformer ranker.")


# A department and its teams; the other teams are in none. Its teams lend recsys at most 4 units of
# each flavor of their idle guarantees, keeping the rest for each other, and share what they borrow
# 2:1 (vision's fair-share weight is 2). It pools 8 T4 units of its own for its teams together.
DEPARTMENT = ("research", "AI Research", ("vision", "nlp"), 4)
DEPARTMENT_POOL = (("t4-shared", 8),)
WEIGHTS = {"vision": Decimal(2)}
# Its head decides its teams' quota requests after their leads (two approval levels).
DEPARTMENT_HEAD = "hana"


def departments_seed(*, admin: User, teams: dict[str, Team]) -> None:
    """The demo's department, where the queue backend has departments (Kueue's cohorts)."""
    if not backend().departments:
        return
    slug, name, members, lends = DEPARTMENT
    pool = {Flavor.objects.get(slug=flavor): units for flavor, units in DEPARTMENT_POOL}
    research = services.department_save(actor=admin, department=Department(slug=slug, name=name, lending_limit=lends),
                                        pool=pool)
    for team_slug in members:
        teams[team_slug] = services.team_update(actor=admin, team=teams[team_slug], department=research,
                                                fair_share_weight=WEIGHTS.get(team_slug, Decimal(1)))


def two_levels_seed(*, admin: User, head: User) -> None:
    """The department's head, who decides its teams' requests once a lead has approved them."""
    research = Department.objects.filter(slug=DEPARTMENT[0]).first()
    if research is None:
        return  # a queue backend without departments
    research.head_approves = True
    services.department_save(actor=admin, department=research, heads=[head])


def people_seed() -> dict[str, User]:
    """A person for each role, by username, all with the demo's password."""
    return {
        username: User.objects.create_user(
            username=username, password=PASSWORD, email=f"{username}@example.com", first_name=first,
            last_name=last, is_platform_admin=is_admin, is_finance=is_finance, is_staff=is_admin,
            is_superuser=is_admin,
        )
        for username, first, last, is_admin, is_finance, _ in PEOPLE
    }


@dataclass(frozen=True)
class QuotaAsks:
    """Quota requests as the demo's people make and decide them, through tenants' services."""

    users: dict[str, User]
    teams: dict[str, Team]
    flavors: dict[str, Flavor]
    today: dt.date

    def ask(self, team: str, who: str, lines: list[tuple[str, int]], why: str,
            ends_in_days: int | None = None) -> QuotaRequest:
        return services.quota_request_create(
            requester=self.users[who], team=self.teams[team], justification=why,
            lines=[services.LineInput(flavor=self.flavors[slug], units=units) for slug, units in lines],
            ends_on=self.today + dt.timedelta(days=ends_in_days) if ends_in_days else None,
        )

    def approved_since(self, request: QuotaRequest, approver: str, start: dt.datetime, note: str = "") -> QuotaRequest:
        # Approved through the service, then dated back: tenants rightly has no service that
        # writes the past, and the history needs quota that was held then.
        services.quota_request_approve(quota_request=request, approver=self.users[approver], note=note)
        QuotaRequest.objects.filter(pk=request.pk).update(created_at=start, decided_at=start)
        request.grants.update(valid_from=start)
        return request


def quota_history_seed(asks: QuotaAsks, *, since: dt.datetime, now: dt.datetime) -> None:
    """The decided requests: each team's permanent quota since `since`, a temporary push from a few
    days ago, a rejected and a cancelled request, and a temporary grant that has run its course."""
    ask, approved_since, today = asks.ask, asks.approved_since, asks.today
    approved_since(ask("vision", "alice", [("h100-80gb", 8), ("t4-shared", 8)], "Baseline for the detector team."),
                   "lena", since)
    approved_since(ask("nlp", "bob", [("h100-80gb", 12)], "Fine-tuning the 8B assistant model."), "omar", since)
    approved_since(ask("recsys", "carol", [("a100-1g-10gb", 21), ("t4-shared", 8)], "Ranking experiments and batch scoring."),
                   "rita", since)
    approved_since(ask("vision", "alice", [("h100-80gb", 4)], "Conference deadline push.", ends_in_days=2),
                   "lena", site_midnight(today - dt.timedelta(days=6)), note="Good luck with the paper!")
    services.quota_request_reject(
        quota_request=ask("nlp", "bob", [("h100-80gb", 16)], "Pre-training from scratch."),
        approver=asks.users["omar"], note="Too large for this quarter; let's talk about a smaller run.",
    )
    services.quota_request_cancel(
        quota_request=ask("recsys", "carol", [("t4-shared", 4)], "Extra scoring capacity."), actor=asks.users["carol"]
    )
    # A temporary grant that has run its course: from midnight twenty days ago through the day
    # before yesterday, so the demo shows an expired request and the nightly backfill's switch
    # from borrowed to guaranteed quota and back.
    holiday = approved_since(ask("recsys", "carol", [("h100-80gb", 2)], "Holiday traffic backfill.", ends_in_days=1),
                             "rita", site_midnight(today - dt.timedelta(days=20)))
    last_day = today - dt.timedelta(days=2)
    QuotaRequest.objects.filter(pk=holiday.pk).update(ends_on=last_day)
    holiday.grants.update(valid_until=site_midnight(last_day + dt.timedelta(days=1)))
    services.quota_grants_expire(now=now)


def templates_seed(*, admin: User, flavors: dict[str, Flavor]) -> None:
    """The four defaults every site starts with, the registries their images come from, and the
    template that runs the user's own code."""
    for prefix, note in (("docker.io/pytorch", "PyTorch's official images"), ("docker.io/vllm", "vLLM's server"),
                         ("quay.io/jupyter", "Jupyter's docker-stacks"), ("nvcr.io/nvidia", "NVIDIA's NGC catalog"),
                         ("docker.io/mpioperator", "Kubeflow's MPI example images")):
        job_services.image_registry_add(user=admin, prefix=prefix, note=note)
    training_templates_seed(admin=admin, flavors=flavors)
    serving_templates_seed(admin=admin, flavors=flavors)
    own_code_seed(admin=admin)
    workspace_seed(admin=admin)
    cpu_notebook_seed(admin=admin)


def training_templates_seed(*, admin: User, flavors: dict[str, Flavor]) -> None:
    """Training on one pod, across several with torchrun, and with mpirun where the site runs Volcano."""
    h100, mig, t4 = flavors["h100-80gb"], flavors["a100-1g-10gb"], flavors["t4-shared"]
    epochs = {"name": "epochs", "type": "int", "default": 10, "min": 1, "max": 1000, "help": "Passes over the data"}
    job_services.template_create(
        user=admin, slug="pytorch-training", name="PyTorch training", kind="training", flavors=[h100, mig, t4],
        description="A single-pod PyTorch training job: your script, your data, a few knobs.",
        image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", command=["python", "-m", "train"],
        args=["--epochs", "{epochs}", "--lr", "{learning_rate}", "--batch-size", "{batch_size}"],
        env={"PYTHONUNBUFFERED": "1"}, default_units=1, max_units=8, default_cpu=8, max_cpu=64, default_memory_gib=32,
        max_memory_gib=512, max_runtime_seconds=3 * 24 * 3600,
        parameters=[epochs,
                    {"name": "learning_rate", "type": "float", "default": 0.0003, "min": 0.000001, "max": 1.0},
                    {"name": "batch_size", "type": "int", "default": 64, "min": 1, "max": 4096}],
    )
    job_services.template_create(
        user=admin, slug="pytorch-distributed", name="PyTorch multi-worker (torchrun)", kind="distributed", flavors=[h100],
        description="torchrun across several pods of an Indexed Job; Kueue admits all workers together or none.",
        image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", command=["torchrun"],
        args=["--nnodes", "{workers}", "--nproc_per_node", "1", "--node_rank", "$(JOB_COMPLETION_INDEX)",
              "--master_addr", "$(MASTER_ADDR)", "--master_port", "$(MASTER_PORT)", "train.py", "--epochs", "{epochs}"],
        default_units=1, max_units=8, default_cpu=16, max_cpu=96, default_memory_gib=64, max_memory_gib=1024,
        max_runtime_seconds=7 * 24 * 3600,
        parameters=[
            {"name": "workers", "type": "int", "default": 2, "min": 2, "max": 8, "help": "Pods, each with the GPUs above"},
            epochs,
        ],
    )
    if kinds.refusal("mpi"):
        return  # MPI jobs need Volcano
    job_services.template_create(
        user=admin, slug="mpi-pi", name="MPI: estimate pi (Open MPI)", kind="mpi", flavors=[h100],
        description="mpirun from a launcher across workers that start together and reach each other over SSH.",
        image="mpioperator/mpi-pi:openmpi", command=["mpirun"],
        args=["-n", "{workers}", "--hostfile", "$(MPI_HOSTFILE)", "/home/mpiuser/pi"],
        default_units=1, max_units=8, default_cpu=8, max_cpu=64, default_memory_gib=32, max_memory_gib=512,
        max_runtime_seconds=24 * 3600,
        parameters=[{"name": "workers", "type": "int", "default": 2, "min": 1, "max": 8,
                     "help": "Pods, each with the GPUs above"}],
    )


def serving_templates_seed(*, admin: User, flavors: dict[str, Flavor]) -> None:
    """What runs until stopped: an inference server and a personal notebook."""
    h100, mig, t4 = flavors["h100-80gb"], flavors["a100-1g-10gb"], flavors["t4-shared"]
    job_services.template_create(
        user=admin, slug="vllm-inference", name="vLLM inference server", kind="inference", flavors=[h100, mig],
        description=(
            "An OpenAI-compatible server for an open model, behind a Service (and an Ingress when the site has a domain)."
        ),
        image="vllm/vllm-openai:v0.6.3", command=[],
        args=["--model", "{model}", "--port", "8000", "--max-model-len", "{max_model_len}"],
        default_units=1, max_units=4, default_cpu=8, max_cpu=32, default_memory_gib=48, max_memory_gib=256, port=8000,
        default_priority="high", allowed_priorities=["normal", "high"], max_runtime_seconds=30 * 24 * 3600,
        parameters=[
            {"name": "model", "type": "choice", "default": "Qwen/Qwen2.5-7B-Instruct",
             "choices": ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"]},
            {"name": "max_model_len", "type": "int", "default": 8192, "min": 1024, "max": 131072},
            {"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4, "help": "Replicas"},
        ],
    )
    job_services.template_create(
        user=admin, slug="jupyterlab", name="JupyterLab notebook", kind="notebook", flavors=[t4, mig],
        description="A personal JupyterLab with PyTorch and a home volume; it stops after an hour idle.",
        image="quay.io/jupyter/pytorch-notebook:cuda12-2024-10-22", command=["start-notebook.py"],
        args=["--ServerApp.token=$(JUPYTER_TOKEN)", "--ServerApp.port=8888"],
        default_units=1, max_units=2, default_cpu=4, max_cpu=16, default_memory_gib=16, max_memory_gib=64, port=8888,
        storage_gib=20, idle_minutes=60, max_runtime_seconds=7 * 24 * 3600, parameters=[],
    )


def own_code_seed(*, admin: User) -> None:
    """The allowed git source and the template that trains from the user's own repository, at the
    revision they give, with their team's data volume if they choose one. Added to a demo site
    seeded before it existed, too; a site that has it already is left as it is."""
    if not GitSource.objects.filter(prefix=GIT_SOURCE[0]).exists():
        job_services.git_source_add(user=admin, prefix=GIT_SOURCE[0], note=GIT_SOURCE[1])
    if WorkloadTemplate.objects.filter(slug=OWN_CODE_TEMPLATE, owner_team__isnull=True).exists():
        return
    flavors = list(Flavor.objects.filter(slug__in=[spec["slug"] for spec in FLAVORS]).order_by("pk"))
    if not flavors:
        return  # a demo site someone has changed: nothing of the demo's to run on
    job_services.template_create(
        user=admin, slug=OWN_CODE_TEMPLATE, name="Train from your git repository", kind="training", flavors=flavors,
        description=("Your own code: the repository you give (https, from an allowed source) is fetched at the revision "
                     "you give into /workspace/code, then python runs the script and arguments you list. Your team's "
                     "data volume, if you choose one, is at /data, read-only."),
        image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", command=["python"], args=[],
        env={"PYTHONUNBUFFERED": "1"}, default_units=1, max_units=8, default_cpu=8, max_cpu=64, default_memory_gib=32,
        max_memory_gib=512, max_runtime_seconds=3 * 24 * 3600,
        parameters=[
            {"name": "repository", "type": "git", "mount_path": "/workspace/code",
             "default": {"url": "https://github.com/pytorch/examples", "revision": "main"},
             "help": "The repository's https URL and a branch, tag or full commit id"},
            {"name": "script", "type": "args", "default": ["/workspace/code/mnist/main.py", "--epochs", "1"],
             "help": "The script under /workspace/code and its arguments, one per line"},
            {"name": "data", "type": "volume", "mount_path": "/data",
             "help": "One of your team's data volumes, mounted read-only at /data"},
        ],
    )


WORKSPACE_TEMPLATE, WORKSPACE_REGISTRY = "vscode", ("docker.io/codercom", "code-server, VS Code in the browser")


def workspace_seed(*, admin: User) -> None:
    """A VS Code workspace beside the JupyterLab notebook, on its flavors, with the team's data
    volume and an S3 key of the team's if the person chooses them. Added to a demo site seeded
    before it existed, too; a site that has it already is left as it is."""
    if not ImageRegistry.objects.filter(prefix=WORKSPACE_REGISTRY[0]).exists():
        job_services.image_registry_add(user=admin, prefix=WORKSPACE_REGISTRY[0], note=WORKSPACE_REGISTRY[1])
    notebook = WorkloadTemplate.objects.filter(slug="jupyterlab", owner_team__isnull=True).first()
    if notebook is None or WorkloadTemplate.objects.filter(slug=WORKSPACE_TEMPLATE, owner_team__isnull=True).exists():
        return  # a demo site someone has changed, or one that has it
    job_services.template_create(
        user=admin, slug=WORKSPACE_TEMPLATE, name="VS Code workspace", kind="workspace",
        flavors=list(notebook.versions.order_by("-number")[0].flavors.all()),
        description=("VS Code in the browser (code-server) with a home volume; your team's data volume at /data and its "
                     "S3 key as the AWS_* variables, if you choose them. It stops after an hour idle."),
        image="docker.io/codercom/code-server:4.96.4", command=[], args=["--bind-addr", "0.0.0.0:8080"],
        default_units=1, max_units=2, default_cpu=4, max_cpu=16, default_memory_gib=16, max_memory_gib=64, port=8080,
        storage_gib=20, idle_minutes=60, max_runtime_seconds=7 * 24 * 3600,
        parameters=[
            {"name": "data", "type": "volume", "mount_path": "/data", "help": "One of your team's data volumes, read-only"},
            {"name": "bucket", "type": "credential", "credential_kind": "s3",
             "help": "One of your team's S3 keys, as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
        ],
    )


CPU_PRESET, CPU_CAPACITY, CPU_TEMPLATE = "cpu-4c-16g", 32, "cpu-notebook"
CPU_GRANTS = (("vision", "lena", 8), ("nlp", "omar", 4))  # team, the lead who asks, units


def cpu_notebook_seed(*, admin: User) -> None:
    """A pool of CPU nodes (the catalog's CPU-only preset: 4 cores and 16 GiB a unit), CPU units for
    two teams, and a JupyterLab notebook without a GPU for preparing data. Added to a demo site
    seeded before it existed, too; a site that has the flavor already is left as it is."""
    if Flavor.objects.filter(slug=CPU_PRESET).exists():
        return
    preset = catalog.PRESETS_BY_KEY[CPU_PRESET]
    cpu = services.flavor_save(actor=admin, flavor=Flavor(**preset.form_initial(), capacity_units=CPU_CAPACITY))
    for slug, lead, units in CPU_GRANTS:
        team, asker = Team.objects.filter(slug=slug).first(), User.objects.filter(username=lead).first()
        if team is None or asker is None:
            continue  # a demo site someone has changed
        asked = services.quota_request_create(requester=asker, team=team, lines=[services.LineInput(flavor=cpu, units=units)],
                                              justification="Preparing data without holding a GPU.")
        services.quota_request_approve(quota_request=asked, approver=admin)
    job_services.template_create(
        user=admin, slug=CPU_TEMPLATE, name="CPU notebook", kind="notebook", flavors=[cpu],
        description=("JupyterLab without a GPU, for cleaning and preparing data: each unit is 4 cores and 16 GiB. Your "
                     "team's data volume at /data, if you choose it. It stops after an hour idle."),
        image="quay.io/jupyter/scipy-notebook:2025-01-13", command=["start-notebook.py"],
        default_units=1, max_units=4, port=8888, storage_gib=10, idle_minutes=60, max_runtime_seconds=7 * 24 * 3600,
        parameters=[{"name": "data", "type": "volume", "mount_path": "/data",
                     "help": "One of your team's data volumes, read-only"}],
    )


# The RuntimeClass NVIDIA's GPU operator installs on every cluster it runs on: the demo's nodes are
# the operator's, so a flavor an admin gives the runtime class "nvidia" runs, and any other name
# shows what the catalog and the launch form say of a RuntimeClass the cluster lacks.
DEMO_RUNTIME_CLASSES = ("nvidia",)


def make_runtime_class(*, name: str) -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}


def runtime_classes_seed() -> str:
    """The RuntimeClasses the demo's node pools have, and any a demo flavor names, made in the
    cluster as the site's GPU operator would. Says what it did, or why the cluster did not take them."""
    named = Flavor.objects.exclude(runtime_class_name="").values_list("runtime_class_name", flat=True)
    names = sorted({*DEMO_RUNTIME_CLASSES, *named})
    try:
        for name in names:
            gateway().apply(make_runtime_class(name=name))
    except KubeError as error:
        return f"The cluster did not take the RuntimeClasses {', '.join(names)} ({error}); flavors naming one wait for them."
    return f"The cluster has the RuntimeClasses {', '.join(names)}."


def data_volumes_seed() -> str:
    """Each demo team's namespace made now (its reconcile would make it within the minute) with a
    data volume in it, made by the platform admin as a member would, so the launch form offers one.
    Says what it did, or why the cluster did not take it: the demo still runs, with launches that
    mount no volume."""
    teams = list(Team.objects.filter(slug__in=[slug for slug, *_ in TEAMS]).order_by("pk"))
    admin = User.objects.get(username="admin")
    try:
        reconcile.platform_reconcile()
        ready = [team for team in teams if reconcile.team_reconcile(team_id=team.pk)]
        for team in ready:
            if not TeamVolume.objects.filter(team=team, name=DATA_VOLUME).exists():
                volumes.volume_create(actor=admin, team=team, name=DATA_VOLUME, storage_class=STORAGE_CLASS,
                                      size_gib=DATA_VOLUME_GIB, shared=True)
    except (KubeError, DomainError) as error:
        return f"The cluster did not take the teams' data volumes ({error}); launches mount none until it does."
    if not ready:
        return "No demo team's namespace is the portal's, so no team has a data volume."
    return f"{', '.join(team.slug for team in ready)}: each has a data volume named {DATA_VOLUME}."
