"""Seeds a believable site for the demo: three teams, a person for each role, a real cluster's
GPU flavors with prices, quota requests in every state, the four default workload templates, and
billing to look at: each team's finished runs over the past days, metered into the hourly rollups,
and a monthly budget for vision. It is an app of its own, right of billing, because it seeds them all. Running
it again the same day changes nothing; on a later day it adds the runs of the days since."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from billing import budgets, metering
from billing.models import Budget, Rate
from jobs import services as job_services
from jobs.models import RunInterval, Workload, WorkloadTemplate
from portal.models import User
from tenants import services
from tenants.models import Flavor, Membership, QuotaRequest, Team

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
         tolerations=[]),
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
]


# List prices per physical GPU-hour; a MIG slice or a time-sliced share pays its fraction.
LIST_PRICES = (("h100-80gb", "2.75"), ("a100-1g-10gb", "1.80"), ("t4-shared", "0.35"))

USAGE_DAYS = 10  # the demo's runs: each of the past ten days (UTC), and today's once finished
# team, workload, owner, flavor, GPU units, start hour (UTC), hours (plus 0-2 by the day, so the chart is not flat)
DEMO_RUNS = [
    ("vision", "detector-nightly", "alice", "h100-80gb", 4, 20, 7),
    ("vision", "segmenter-sweep", "bob", "t4-shared", 4, 9, 5),
    ("nlp", "assistant-finetune", "bob", "h100-80gb", 8, 1, 9),
    ("recsys", "ranker-scoring", "carol", "a100-1g-10gb", 7, 6, 10),
    ("recsys", "ranker-eval", "rita", "t4-shared", 2, 14, 3),
]
DEMO_BUDGET = ("vision", "1500")  # about half a month of its runs: the bar fills and the forecast dates the crossing


class Command(BaseCommand):
    help = "Seed the demo site (idempotent) and print who can log in."

    def handle(self, *args: Any, **options: Any) -> None:
        if Team.objects.exists():
            self.stdout.write("Demo data is already there.")
        else:
            self.seed()
        days = seed_usage(now=timezone.now())
        self.stdout.write(f"Usage of the past {days} days is metered; {DEMO_BUDGET[0]} has a monthly budget.")
        self.stdout.write(f"\nLog in with any of these (password for all: {PASSWORD}):")
        for username, *_rest, roles in PEOPLE:
            user = User.objects.get(username=username)
            what = ", ".join(f"{role} of {team}" for team, role in roles) or (
                "platform admin" if user.is_platform_admin else "finance"
            )
            self.stdout.write(f"  {username:<8} {what}")

    @transaction.atomic
    def seed(self) -> None:
        users: dict[str, User] = {}
        for username, first, last, is_admin, is_finance, _ in PEOPLE:
            user = User.objects.create_user(
                username=username, password=PASSWORD, email=f"{username}@example.com", first_name=first,
                last_name=last, is_platform_admin=is_admin, is_finance=is_finance, is_staff=is_admin,
                is_superuser=is_admin,
            )
            users[username] = user
        admin = users["admin"]
        flavors = {spec["slug"]: services.flavor_save(actor=admin, flavor=Flavor(**spec)) for spec in FLAVORS}
        teams = {
            slug: services.team_create(actor=admin, slug=slug, name=name, cost_center=cc, description=description)
            for slug, name, cc, description in TEAMS
        }
        for username, *_rest, roles in PEOPLE:
            for team_slug, role in roles:
                Membership.objects.create(team=teams[team_slug], user=users[username], role=role)

        def ask(team: str, who: str, lines: list[tuple[str, int]], why: str, ends_in_days: int | None = None) -> QuotaRequest:
            return services.quota_request_create(
                requester=users[who], team=teams[team], justification=why,
                lines=[services.LineInput(flavor=flavors[slug], units=units) for slug, units in lines],
                ends_on=timezone.localdate() + dt.timedelta(days=ends_in_days) if ends_in_days else None,
            )

        approve = services.quota_request_approve
        approve(
            quota_request=ask("vision", "alice", [("h100-80gb", 8), ("t4-shared", 8)], "Baseline for the detector team."),
            approver=users["lena"],
        )
        approve(
            quota_request=ask("nlp", "bob", [("h100-80gb", 12)], "Fine-tuning the 8B assistant model."), approver=users["omar"]
        )
        approve(
            quota_request=ask(
                "recsys", "carol", [("a100-1g-10gb", 21), ("t4-shared", 8)], "Ranking experiments and batch scoring."
            ),
            approver=users["rita"],
        )
        approve(
            quota_request=ask("vision", "alice", [("h100-80gb", 4)], "Conference deadline push.", ends_in_days=2),
            approver=users["lena"], note="Good luck with the paper!",
        )
        services.quota_request_reject(
            quota_request=ask("nlp", "bob", [("h100-80gb", 16)], "Pre-training from scratch."),
            approver=users["omar"], note="Too large for this quarter; let's talk about a smaller run.",
        )
        services.quota_request_cancel(
            quota_request=ask("recsys", "carol", [("t4-shared", 4)], "Extra scoring capacity."), actor=users["carol"]
        )
        # One temporary grant that has already run its course, so the demo shows an expired request.
        finished = ask("recsys", "carol", [("h100-80gb", 2)], "Holiday traffic backfill.", ends_in_days=1)
        approve(quota_request=finished, approver=users["rita"])
        finished.grants.update(
            valid_from=timezone.now() - dt.timedelta(days=20), valid_until=timezone.now() - dt.timedelta(days=1)
        )
        services.quota_grants_expire()
        ask("vision", "alice", [("a100-1g-10gb", 14)], "Notebooks for the new interns.", ends_in_days=30)
        ask("nlp", "bob", [("t4-shared", 4), ("a100-1g-10gb", 7)], "Serving the small model for the demo.")
        seed_templates(admin=admin, flavors=flavors)
        ask("recsys", "carol", [("h100-80gb", 4)], "Trying a transformer ranker.")


def _history_start(now: dt.datetime) -> dt.datetime:
    return dt.datetime.combine(now.astimezone(dt.UTC).date() - dt.timedelta(days=USAGE_DAYS), dt.time(), dt.UTC)


@transaction.atomic
def seed_usage(*, now: dt.datetime) -> int:
    """The demo's billing: list prices in force since the start of its history, the finished runs
    of DEMO_RUNS on each of the past USAGE_DAYS days (and today's once ended), metered by
    `billing.metering.rollups_refresh` as the beat would, and vision's budget unless finance has
    already set one. Runs are keyed by pod uid (team, workload, day), so running it again the same
    day changes nothing. Returns the number of days of history."""
    finance = User.objects.filter(username="finance").first()
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.filter(slug__in=[slug for slug, _ in LIST_PRICES])}
    since = _history_start(now)
    for slug, price in LIST_PRICES:
        # rate_set refuses the past, rightly; the demo's history is older than its seeding.
        if slug in flavors and not Rate.objects.filter(flavor=flavors[slug], effective_from__lte=since).exists():
            Rate.objects.create(flavor=flavors[slug], price_per_gpu_hour=Decimal(price), currency="USD",
                                effective_from=since, note="Demo list price", created_by=finance)
    teams = {team.slug: team for team in Team.objects.filter(slug__in={run[0] for run in DEMO_RUNS})}
    users = {user.username: user for user in User.objects.filter(username__in={run[2] for run in DEMO_RUNS})}
    template = WorkloadTemplate.objects.filter(slug="pytorch-training").first()
    version = template.versions.order_by("-number").first() if template else None
    for team_slug, name, owner, flavor_slug, units, hour, hours in DEMO_RUNS:
        team, user, flavor = teams.get(team_slug), users.get(owner), flavors.get(flavor_slug)
        if team is None or user is None or flavor is None or version is None:
            continue  # a demo site someone has changed: seed what still fits
        workload, _ = Workload.objects.get_or_create(team=team, name=name, defaults={
            "owner": user, "template_version": version, "flavor": flavor, "units": units, "cpu": 8, "memory_gib": 32,
            "priority": "normal", "phase": Workload.Phase.SUCCEEDED, "created_at": since, "submitted_at": since,
            "reason": "Demo history: a run that finished before the portal's demo began."})
        for offset in range(USAGE_DAYS + 1):
            day = since.date() + dt.timedelta(days=offset)
            started = dt.datetime.combine(day, dt.time(hour), dt.UTC)
            ended = started + dt.timedelta(hours=hours + day.toordinal() % 3, minutes=7 * (day.day % 5))
            if ended > now:
                continue
            uid = f"demo-{team_slug}-{name}-{day:%Y%m%d}"
            RunInterval.objects.get_or_create(pod_uid=uid, defaults={
                "workload": workload, "pod_name": f"{name}-{day:%m%d}", "node": "demo-gpu-node",
                "resource_name": flavor.resource_name, "units": units, "started_at": started, "ended_at": ended})
            if workload.finished_at is None or ended > workload.finished_at:
                Workload.objects.filter(pk=workload.pk).update(finished_at=ended)
                workload.finished_at = ended
    metering.rollups_refresh()
    budget_team = teams.get(DEMO_BUDGET[0])
    if budget_team is not None and finance is not None and not Budget.objects.filter(account__team=budget_team).exists():
        budgets.budget_set(actor=finance, team=budget_team, amount=DEMO_BUDGET[1], currency="USD")
    return USAGE_DAYS


def seed_templates(*, admin: User, flavors: dict[str, Flavor]) -> None:
    """The four defaults every site starts with, and the registries their images come from."""
    h100, mig, t4 = flavors["h100-80gb"], flavors["a100-1g-10gb"], flavors["t4-shared"]
    for prefix, note in (("docker.io/pytorch", "PyTorch's official images"), ("docker.io/vllm", "vLLM's server"),
                         ("quay.io/jupyter", "Jupyter's docker-stacks"), ("nvcr.io/nvidia", "NVIDIA's NGC catalog")):
        job_services.image_registry_add(user=admin, prefix=prefix, note=note)
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
