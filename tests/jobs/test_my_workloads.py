"""The dashboard's "Your workloads" card: the member's own running and queued work, with Open for
a notebook they may open, nobody else's and nothing finished."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import notebooks, services
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


# --- "My notebook": open the newest, or start one where there is nothing to choose -----------------


def test_my_notebook_starts_one_where_there_is_nothing_to_choose_then_opens_it(settings, ready_team, member, notebook,
                                                                               django_capture_on_commit_callbacks):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.example.com"
    client = login(member)
    assert 'data-testid="my-notebook"' in client.get("/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        started = client.post(reverse("jobs:my-notebook"))
    (lab,) = Workload.objects.all()
    assert (lab.owner, lab.team, lab.template_version.template) == (member, ready_team, notebook)
    assert started.status_code == 302 and started["Location"] == reverse("jobs:workload-detail", args=[lab.pk])

    again = client.post(reverse("jobs:my-notebook"))  # not running yet: its page, and no second one
    assert again["Location"] == reverse("jobs:workload-detail", args=[lab.pk]) and Workload.objects.count() == 1
    _in_phase(lab, Workload.Phase.RUNNING)
    assert client.post(reverse("jobs:my-notebook"))["Location"] == reverse("jobs:workload-open", args=[lab.pk])


def test_with_several_named_notebooks_the_button_opens_the_newest(settings, ready_team, member, notebook, flavor):
    settings.PORTAL_INGRESS_DOMAIN = "gpu.example.com"
    _in_phase(launch(member, ready_team, notebook, flavor, name="data-prep"), Workload.Phase.RUNNING)
    newest = _in_phase(launch(member, ready_team, notebook, flavor, name="modelling"), Workload.Phase.RUNNING)
    assert [w.name for w in notebooks.my_notebooks(user=member)] == ["modelling", "data-prep"]
    assert login(member).post(reverse("jobs:my-notebook"))["Location"] == reverse("jobs:workload-open", args=[newest.pk])


def test_with_two_notebook_templates_the_button_goes_to_the_form_with_the_team_filled_in(
        ready_team, member, notebook, admin_user, flavor):
    client = login(member)
    services.template_create(user=admin_user, slug="jupyter-big", name="Big notebook", kind=WorkloadKind.NOTEBOOK,
                             flavors=[flavor], image="jupyter/base:1", port=8888, parameters=[])
    chose = client.post(reverse("jobs:my-notebook"), follow=True)
    assert chose.redirect_chain[0][0] == f"{reverse('jobs:workload-launch')}?team={ready_team.slug}"
    assert "Choose the team, template and flavor of your notebook." in chose.content.decode()
    assert not Workload.objects.exists()


def test_a_refused_start_says_why_on_the_filled_in_form(team, member, notebook):
    refused = login(member).post(reverse("jobs:my-notebook"), follow=True)  # the team has no quota and no namespace
    assert refused.redirect_chain[0][0] == f"{reverse('jobs:workload-launch')}?template={notebook.pk}&team={team.slug}"
    assert "Your notebook was not started:" in refused.content.decode()
    assert not Workload.objects.exists()


def test_finance_has_no_notebook_button(finance_user):
    client = login(finance_user)
    assert 'data-testid="my-notebook"' not in client.get("/").content.decode()
    assert client.post(reverse("jobs:my-notebook")).status_code == 403
