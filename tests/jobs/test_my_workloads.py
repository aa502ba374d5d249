"""The dashboard's "Your workloads" card: the member's own running and queued work, with Open for
a notebook they may open, nobody else's and nothing finished."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import Workload, WorkloadKind
from tests.conftest import login
from tests.helpers import launch

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def notebook(admin_user, flavor):
    return services.template_create(user=admin_user, slug="jupyter", name="Jupyter notebook", kind=WorkloadKind.NOTEBOOK,
                                    flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])


def _in_phase(workload: Workload, phase: str) -> Workload:
    Workload.objects.filter(pk=workload.pk).update(phase=phase)
    return workload


def test_the_card_lists_my_running_and_queued_workloads_with_open_for_my_notebook(
        settings, ready_team, member, lead, training, notebook, flavor):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.example.com"
    running = _in_phase(launch(member, ready_team, training, flavor, name="detector"), Workload.Phase.RUNNING)
    queued = _in_phase(launch(member, ready_team, training, flavor, name="waiting-run"), Workload.Phase.QUEUED)
    lab = _in_phase(launch(member, ready_team, notebook, flavor, name="my-lab"), Workload.Phase.RUNNING)
    _in_phase(launch(member, ready_team, training, flavor, name="finished"), Workload.Phase.SUCCEEDED)
    _in_phase(launch(lead, ready_team, notebook, flavor, name="leads-lab"), Workload.Phase.RUNNING)

    card = login(member).get(reverse("jobs:my-workloads"), headers=HTMX).content.decode()

    for shown in (running, queued, lab):
        assert f'href="/workloads/{shown.pk}/"' in card
    assert "finished" not in card and "leads-lab" not in card
    assert f'href="{reverse("jobs:workload-open", args=[lab.pk])}"' in card
    assert f'data-testid="open-{running.pk}"' not in card  # training has no address to open
    assert "<html" not in card  # the fragment alone, for the dashboard


def test_a_teammates_notebook_is_not_on_my_card(settings, ready_team, member, lead, notebook, flavor):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.example.com"
    _in_phase(launch(member, ready_team, notebook, flavor, name="alices-lab"), Workload.Phase.RUNNING)
    card = login(lead).get(reverse("jobs:my-workloads"), headers=HTMX).content.decode()
    assert "alices-lab" not in card and "Nothing of yours is running or queued." in card


def test_the_dashboard_loads_the_card_for_members_only(member, finance_user):
    assert 'hx-get="/workloads/mine/"' in login(member).get("/").content.decode()
    assert 'hx-get="/workloads/mine/"' not in login(finance_user).get("/").content.decode()


def test_the_card_has_a_page_of_its_own_without_javascript(ready_team, member, training, flavor):
    _in_phase(launch(member, ready_team, training, flavor, name="detector"), Workload.Phase.QUEUED)
    page = login(member).get(reverse("jobs:my-workloads")).content.decode()
    assert '<nav id="site-nav"' in page and "detector" in page
