"""Every whole number a page or the API reads is ASCII digits, at most 18 of them (issue 22, §6).

Django's and DRF's IntegerField read "１２" as 12 and any number of digits: a launch hint asked
for 40 digits of units multiplied them into the flavor's price, a 500; CPU cores typed in
full-width digits launched. portal.adapters.WholeNumberField and WholeNumberSerializerField read
them as whole_number reads a query, and a launch hint for a count the template refuses is the
refusal alone."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from billing.rates import services as billing_services
from jobs import services as job_services
from jobs.models import IdleDefaults, Workload, WorkloadKind, WorkloadTemplate
from portal.adapters import WHOLE_NUMBER_INVALID, signed_whole_number
from portal.models import ApiToken
from tenants.models import QuotaRequest
from tests.conftest import login
from tests.helpers import api, launch
from tests.jobs.test_template_editor import editor_form
from tests.jobs.test_workload_pages import launch_data
from tests.tenants.test_platform_pages import team_form

pytestmark = pytest.mark.django_db

NOT_WHOLE_NUMBERS = ["１２", "١٢", "²", "1" * 19, "9" * 40, "1e3", "1_000", "0x10", "1.5", "NaN"]


@pytest.fixture
def priced(flavor, mig_flavor, finance_user):
    for priced_flavor in (flavor, mig_flavor):
        billing_services.rate_set(actor=finance_user, flavor=priced_flavor, price_per_gpu_hour="2.50")


@pytest.mark.parametrize("units", ["1" * 40, "9" * 400, "1" * 18, "-" + "1" * 18, "0", "9"])
def test_a_launch_hint_for_a_count_the_template_refuses_is_the_refusal_without_a_server_error(ready_team, member,
                                                                                            training, priced, units):
    client = login(member)
    client.raise_request_exception = False

    response = client.get(reverse("jobs:launch-hint"), launch_data(units=units), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    fragment = response.content.decode()
    assert "GPU units must be between 1 and 8 for PyTorch training." in fragment or WHOLE_NUMBER_INVALID in fragment
    assert "per hour" not in fragment


def test_a_launch_hint_refused_for_another_reason_with_a_huge_count_is_no_server_error(ready_team, member, training,
                                                                                      priced):
    client = login(member)
    client.raise_request_exception = False

    # The flavor is refused first, so the units are never checked by the service.
    response = client.get(reverse("jobs:launch-hint"), launch_data(units="1" * 18, flavor="a100-1g10gb"), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert "PyTorch training cannot run on A100 1g.10gb" in response.content.decode()
    assert "per hour" not in response.content.decode()


def test_a_launch_hint_within_the_templates_bounds_still_prices_the_launch(ready_team, member, training, priced):
    response = login(member).get(reverse("jobs:launch-hint"), launch_data(units="2"), HTTP_HX_REQUEST="true")

    assert "About 5.00 USD per hour" in response.content.decode()


@pytest.mark.parametrize("field", ["units", "cpu", "memory_gib"])
@pytest.mark.parametrize("value", NOT_WHOLE_NUMBERS)
def test_the_launch_form_reads_whole_numbers_in_ascii_digits_only(ready_team, member, training, field, value):
    response = login(member).post(reverse("jobs:workload-launch"), launch_data(**{field: value}))

    assert response.status_code == 200
    assert response.context["form"].errors[field] == [WHOLE_NUMBER_INVALID]
    assert not Workload.objects.exists()


@pytest.mark.parametrize("field", ["units", "cpu", "memory_gib"])
@pytest.mark.parametrize("value", ["１", "１２", "9" * 40, 10**40, "1e3", True])
def test_the_launch_api_reads_whole_numbers_in_ascii_digits_only(ready_team, member, training, flavor, field, value):
    body: dict[str, Any] = {"team": "vision", "template": training.pk, "flavor": flavor.slug, field: value}

    response = api(member).post("/api/workloads/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not Workload.objects.exists()


@pytest.mark.parametrize("field", ["max_units", "max_cpu", "port", "idle_minutes"])
def test_the_template_editor_reads_whole_numbers_in_ascii_digits_only(lead, flavor, field):
    changes: dict[str, Any] = {field: "１２"}
    response = login(lead).post(reverse("jobs:template-create"), editor_form(owner_team="vision", **changes))

    assert response.status_code == 400
    assert WHOLE_NUMBER_INVALID in response.content.decode()
    assert not WorkloadTemplate.objects.exists()


@pytest.mark.parametrize("bound", ["１", "1_0", "nan", "inf"])
def test_a_parameter_bound_the_template_editor_cannot_read_as_ascii_digits_is_refused_naming_it(lead, flavor, bound):
    response = login(lead).post(reverse("jobs:template-create"), editor_form(
        owner_team="vision", params=[("epochs", "int", "3", bound, "100", "")]))

    assert response.status_code == 400
    assert f"Parameter epochs: its min must be a number, not “{bound}”." in response.content.decode()
    assert not WorkloadTemplate.objects.exists()


@pytest.mark.parametrize("value", ["１", "１０"])
def test_the_idle_policy_page_reads_whole_numbers_in_ascii_digits_only(admin_user, value):
    client = login(admin_user)
    form = {"threshold_percent": "5", "window_minutes": value, "action": "notify", "grace_minutes": "30",
            "min_threshold_percent": "1", "max_threshold_percent": "10", "min_window_minutes": "10",
            "max_window_minutes": "600", "min_grace_minutes": "5", "max_grace_minutes": "120"}

    response = client.post(reverse("jobs:idle-defaults"), form)

    assert response.status_code == 400
    assert WHOLE_NUMBER_INVALID in response.content.decode()
    assert not IdleDefaults.objects.exists()


@pytest.mark.parametrize("days", ["１２", "9" * 40])
def test_a_token_lifetime_is_read_in_ascii_digits_on_the_page_and_in_the_api(member, days):
    page = login(member).post(reverse("api-tokens"), {"name": "cli", "expires_in_days": days, "scope": "read"})
    by_api = api(member).post("/api/tokens/", {"name": "cli", "expires_in_days": days}, format="json")

    assert WHOLE_NUMBER_INVALID in page.content.decode()
    assert by_api.status_code == 400 and "expires_in_days" in by_api.json()["errors"]
    assert not ApiToken.objects.exists()


def test_replicas_written_in_full_width_digits_are_refused_by_the_api(ready_team, member, admin_user, flavor):
    vllm = job_services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor],
        image="vllm/vllm-openai:v0.6.3", port=8000,
        parameters=[{"name": "replicas", "type": "int", "default": 1, "min": 1, "max": 4}])
    server = launch(member, ready_team, vllm, flavor)

    response = api(member).post(f"/api/workloads/{server.pk}/scale/", {"replicas": "２"}, format="json")

    assert response.status_code == 400
    assert "replicas" in response.json()["errors"]
    server.refresh_from_db()
    assert server.workers == 1


@pytest.mark.parametrize(("given", "read"), [("12", 12), (" 12 ", 12), ("-3", -3), ("+3", 3), (7, 7), ("0", 0),
                                             ("9" * 18, int("9" * 18))])
def test_a_whole_number_in_ascii_digits_is_read(given, read):
    assert signed_whole_number(given) == read


@pytest.mark.parametrize("given", [*NOT_WHOLE_NUMBERS, "", None, True, 1.0, 10**18, [1], "1 2"])
def test_anything_else_is_no_whole_number(given):
    assert signed_whole_number(given) is None


@pytest.mark.parametrize("line", [{"units": "１"}, {"units": "9" * 40}])
def test_a_quota_request_line_reads_units_in_ascii_digits_only(team, member, flavor, line):
    body = {"team": "vision", "justification": "Fine-tuning", "lines": [{"flavor": flavor.pk, **line}]}

    response = api(member).post("/api/quota-requests/", body, format="json")

    assert response.status_code == 400
    assert f"units “{line['units']}” is not a whole number" in response.json()["message"]
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize("field", ["cpu_limit_cores", "memory_limit_gib", "pod_limit"])
def test_a_teams_policy_reads_whole_numbers_in_ascii_digits_on_the_page_and_in_the_api(admin_user, team, field):
    before = getattr(team, field)
    page = login(admin_user).post(reverse("tenants:team-edit", args=[team.slug]), team_form(**{field: "１２"}))
    by_api = api(admin_user).patch(f"/api/teams/{team.slug}/", {field: "１２"}, format="json")

    assert page.status_code == 400 and WHOLE_NUMBER_INVALID in page.content.decode()
    assert by_api.status_code == 400 and field in by_api.json()["errors"]
    team.refresh_from_db()
    assert getattr(team, field) == before


@pytest.mark.parametrize("field", ["idle_threshold_percent", "idle_window_minutes", "idle_grace_minutes"])
def test_a_templates_idle_policy_through_the_api_reads_whole_numbers_in_ascii_digits(admin_user, flavor, field):
    body = {"slug": "idle", "name": "Idle", "kind": "notebook", "flavors": [flavor.slug], "image": "jupyter/base:1",
            "port": 8888, field: "１０"}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not WorkloadTemplate.objects.exists()
