"""Seeds a believable site for the demo: three teams, a person for each role, a real cluster's
GPU flavors and quota requests in every state. Running it again changes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from portal.models import User
from tenants import services
from tenants.models import Flavor, Membership, QuotaRequest, Team

PASSWORD = "gpu-portal-demo"

FLAVORS = [
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


class Command(BaseCommand):
    help = "Seed the demo site (idempotent) and print who can log in."

    def handle(self, *args: Any, **options: Any) -> None:
        if Team.objects.exists():
            self.stdout.write("Demo data is already there.")
        else:
            self.seed()
        self.stdout.write("\nLog in with any of these (password for all: %s):" % PASSWORD)
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
        approve(quota_request=ask("vision", "alice", [("h100-80gb", 8), ("t4-shared", 8)], "Baseline for the detector team."), approver=users["lena"])
        approve(quota_request=ask("nlp", "bob", [("h100-80gb", 12)], "Fine-tuning the 8B assistant model."), approver=users["omar"])
        approve(quota_request=ask("recsys", "carol", [("a100-1g-10gb", 21), ("t4-shared", 8)], "Ranking experiments and batch scoring."), approver=users["rita"])
        approve(quota_request=ask("vision", "alice", [("h100-80gb", 4)], "Conference deadline push.", ends_in_days=2), approver=users["lena"], note="Good luck with the paper!")
        services.quota_request_reject(quota_request=ask("nlp", "bob", [("h100-80gb", 16)], "Pre-training from scratch."), approver=users["omar"], note="Too large for this quarter; let's talk about a smaller run.")
        services.quota_request_cancel(quota_request=ask("recsys", "carol", [("t4-shared", 4)], "Extra scoring capacity."), actor=users["carol"])
        # One temporary grant that has already run its course, so the demo shows an expired request.
        finished = ask("recsys", "carol", [("h100-80gb", 2)], "Holiday traffic backfill.", ends_in_days=1)
        approve(quota_request=finished, approver=users["rita"])
        finished.grants.update(valid_from=timezone.now() - dt.timedelta(days=20), valid_until=timezone.now() - dt.timedelta(days=1))
        services.quota_grants_expire()
        ask("vision", "alice", [("a100-1g-10gb", 14)], "Notebooks for the new interns.", ends_in_days=30)
        ask("nlp", "bob", [("t4-shared", 4), ("a100-1g-10gb", 7)], "Serving the small model for the demo.")
        ask("recsys", "carol", [("h100-80gb", 4)], "Trying a transformer ranker.")
