"""Every page a person can open, asked with hostile values in every query parameter the pages
read: no answer may be a server error. The API has Schemathesis (test_api_fuzz.py); the pages
read their query strings by hand (filters, the launch form's preselection, months, sort orders,
page numbers), so this walks them all with the values that break hand-written readers."""

from __future__ import annotations

import pytest
from django.urls import reverse

from billing import periods
from tests.conftest import login
from tests.helpers import file_request, launch

pytestmark = pytest.mark.django_db

# Every parameter a page reads: its own request.GET reads, the launch form preselected from the
# query (the training template's parameters too) and the list filters (a page ignores the rest).
PARAMETERS = ["team", "template", "flavor", "units", "cpu", "memory_gib", "priority", "name", "p_epochs",
              "p_learning_rate", "p_image_tag", "page", "month", "sort", "dir", "status", "phase", "owner", "mine",
              "preset", "renew", "rd", "pod", "follow", "next"]
HOSTILE = ["%", "%s%(x)s{0}", "-1", "0", "99999999999999999999999", "1e309", "nan", "²", "１",
           "' OR 1=1 --", "<script>alert(1)</script>", "../../etc/passwd", "vision\u202e", "x" * 5000, "",
           "2026-13-45", "9999-12", "0000-00", "\t", "team[]=a"]


def _pages(team, workload, request, flavor, month) -> list[str]:
    names = [
        ("tenants:dashboard", []), ("tenants:team-list", []), ("tenants:team-detail", [team.slug]),
        ("tenants:team-requests", [team.slug]), ("tenants:team-audit", [team.slug]), ("tenants:team-cluster", [team.slug]),
        ("tenants:capacity", []), ("tenants:quota-request-list", []), ("tenants:quota-request-create", []),
        ("tenants:quota-preview", []), ("tenants:quota-request-detail", [request.pk]), ("tenants:approvals", []),
        ("tenants:audit", []), ("tenants:flavor-list", []), ("tenants:flavor-edit", [flavor.slug]),
        ("tenants:team-create", []), ("tenants:team-edit", [team.slug]), ("tenants:node-list", []),
        ("jobs:template-list", []), ("jobs:template-create", []), ("jobs:idle-defaults", []),
        ("jobs:workload-launch", []), ("jobs:launch-hint", []), ("jobs:workload-list", []),
        ("jobs:team-gpu-use", [team.slug]), ("jobs:notification-preferences", []),
        ("jobs:workload-detail", [workload.pk]), ("jobs:workload-live", [workload.pk]),
        ("jobs:workload-logs", [workload.pk]), ("jobs:workload-telemetry", [workload.pk]),
        ("jobs:workload-logs-download", [workload.pk]),
        ("billing:my-usage", []), ("billing:team-usage", [team.slug]), ("billing:team-efficiency", [team.slug]),
        ("billing:finance-overview", []), ("billing:rate-card", []), ("billing:budget-list", []),
        ("billing:budget-detail", [team.slug]), ("billing:budget-bar", [team.slug]), ("billing:alert-email", []),
        ("billing:statement-list", []), ("billing:statement-detail", [f"{month:%Y-%m}"]),
        ("billing:statement-csv", [f"{month:%Y-%m}"]),
        ("api-tokens", []), ("notifications", []), ("notification-bell", []),
    ]
    return [reverse(name, args=args) for name, args in names]


@pytest.mark.parametrize("who", ["member", "admin_user", "finance_user"])
def test_no_page_answers_a_hostile_query_with_a_server_error(request, who, ready_team, member, lead, training, flavor,
                                                             simulated):
    workload = launch(member, ready_team, training, flavor)
    quota_request = file_request(ready_team, member, flavor)
    pages = _pages(ready_team, workload, quota_request, flavor, periods.current_month())
    client = login(request.getfixturevalue(who))
    client.raise_request_exception = False  # a 500 is counted below, with the page and value that made it

    failures = []
    for page in pages:
        for value in HOSTILE:
            response = client.get(page, dict.fromkeys(PARAMETERS, value))
            if response.status_code >= 500:
                failures.append((page, value[:40], response.status_code))
    assert failures == [], "\n".join(map(str, failures))
