"""API-server calls one open workload page costs, on the simulated cluster.

A running training workload's page is rendered once, then its live fragment is polled as the
browser does while the page stays open: every 3 s, so 20 polls make one minute. A counting
wrapper stands in front of the gateway and tallies every call by method (lists also by kind),
and the objects the lists return. The namespace holds events of other objects too, as a busy
team's would, so a list that is not narrowed to the workload reads them all. When the page
has an on-demand logs panel, opening it once is counted on its own.

    .venv/bin/python benchmarks/live_page.py [--polls 20] [--other-events 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start


class CountingGateway:
    """Delegates to the real gateway and counts what passes through.

    Its own wrapper rather than portal.kube.counting's: it also runs on the code from before the
    live page got cheaper, which has no such module, to measure the "before" figure again."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.by_method: Counter[str] = Counter()
        self.objects_listed = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in {"apply", "delete", "get", "list", "watch", "pod_logs"}:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            key = f"{name} {args[1]}" if name == "list" else name
            self.by_method[key] += 1
            result = attr(*args, **kwargs)
            if name == "list":
                self.objects_listed += len(result[0])
            return result

        return counted

    def take(self) -> dict[str, Any]:
        taken = {"calls": sum(self.by_method.values()), "by_method": dict(sorted(self.by_method.items())),
                 "objects_listed": self.objects_listed}
        self.by_method, self.objects_listed = Counter(), 0
        return taken


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--other-events", type=int, default=200)
    args = parser.parse_args()

    os.environ.update({"PORTAL_VAR_DIR": tempfile.mkdtemp(prefix="gpu-portal-bench-"), "PORTAL_CLUSTER": "simulated",
                       "DJANGO_SETTINGS_MODULE": "portal.settings", "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING"})
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args.polls, args.other_events)
    print(json.dumps(figures, indent=2))
    record("live_page", figures)


def _events(namespace: str, workload_pod: str, others: int) -> list[dict[str, Any]]:
    """A few events of the workload's pod among many of other objects in the namespace."""
    def event(name: str, involved: str, reason: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": involved, "namespace": namespace},
                "reason": reason, "message": f"{reason} {involved}", "type": "Normal",
                "lastTimestamp": "2026-11-23T10:00:00Z", "eventTime": None}

    mine = [event(f"{workload_pod}.{i}", workload_pod, reason) for i, reason in enumerate(["Scheduled", "Pulled", "Started"])]
    return mine + [event(f"other-{i}.{i}", f"other-{i % 40}", "Started") for i in range(others)]


def run(polls: int, other_events: int) -> dict[str, Any]:
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import NoReverseMatch, reverse

    from billing.rates import services as billing_services
    from jobs import services, sync
    from jobs.models import Workload
    from portal.kube import gateway, reset_gateway
    from portal.models import User
    from tenants import reconcile
    from tenants.models import Flavor, Membership, QuotaGrant, Team

    setup_test_environment()
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    member = User.objects.create(username="bench-member")
    flavor = Flavor.objects.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100",
                                   capacity_units=8, node_labels={"gpu": "h100"})
    billing_services.rate_set(actor=admin, flavor=flavor, price_per_gpu_hour="2.75")  # nothing launches unpriced
    team = Team.objects.create(slug="bench", name="Bench")
    Membership.objects.create(team=team, user=member, role=Membership.Role.MEMBER)
    QuotaGrant.objects.create(team=team, flavor=flavor, units=8)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    services.image_registry_add(user=admin, prefix="registry.example.com")
    template = services.template_create(user=admin, slug="bench-train", name="Bench", kind="training", flavors=[flavor],
                                        image="registry.example.com/train:1", command=["python", "train.py"], parameters=[])
    workload = services.workload_launch(user=member, request=services.LaunchRequest(
        team=Team.objects.get(pk=team.pk), template=template, flavor=flavor, units=1))
    cluster = gateway()
    # Long enough to stay running through every poll: polls do not advance the simulated clock.
    cluster.advance(1)  # type: ignore[attr-defined]
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING, workload.phase
    pod = workload.intervals.get().pod_name
    for event in _events(team.namespace, pod, other_events):
        cluster.apply(event)

    counting = CountingGateway(cluster)
    reset_gateway(counting)
    browser = Client()
    browser.force_login(member)

    def get(url: str, htmx: bool = False) -> str:
        response = browser.get(url, headers={"HX-Request": "true"} if htmx else None)
        assert response.status_code == 200, (url, response.status_code)
        return response.content.decode()

    result: dict[str, Any] = {"commit": os.popen(f"git -C {ROOT} describe --always --dirty").read().strip()}
    page = get(reverse("jobs:workload-detail", args=[workload.pk]))
    result["page"] = counting.take()
    live = reverse("jobs:workload-live", args=[workload.pk])
    # The page's live section loads once on its own, then every 3 s.
    fragments: list[Callable[[], str]] = [lambda: get(live, htmx=True)]
    assert 'hx-trigger="load, every 3s"' in page, "the page no longer polls as this script assumes"
    fragments[0]()
    result["first_load"] = counting.take()
    for _ in range(polls):
        for fragment in fragments:
            fragment()
    result[f"{polls}_polls"] = counting.take()
    try:
        logs = reverse("jobs:workload-logs", args=[workload.pk])
    except NoReverseMatch:
        result["open_logs_once"] = "no separate logs panel: every poll reads the logs"
    else:
        get(logs, htmx=True)
        result["open_logs_once"] = counting.take()
    reset_gateway(None)
    return result


if __name__ == "__main__":
    main()
