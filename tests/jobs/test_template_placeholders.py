"""A template's placeholders fill in a bounded value (issue 22, §6): a width or precision beyond
64, a width taken from another placeholder, a nameless or numbered placeholder and a brace alone
are refused in words when the template is saved (the page, the API, the service), and a version
saved before these rules cannot make a process build a huge string when it is launched."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import Workload, WorkloadKind, WorkloadTemplate, WorkloadTemplateVersion
from jobs.parameters import FORMAT_MOST, RENDERED_MOST, VALUE_MOST, ParameterError, render
from portal.errors import DomainError
from tests.conftest import login
from tests.helpers import api, launch
from tests.jobs.test_template_editor import editor_form

pytestmark = pytest.mark.django_db

VALUES = {"epochs": 3, "lr": 0.001, "mode": "fast"}

REFUSED = {
    "{epochs:>1000000000}": "asks for a width of 1000000000; a placeholder's width and precision may be at most 64.",
    "{epochs:>65}": "asks for a width of 65;",
    "{lr:.100f}": "asks for a precision of 100;",
    "{epochs:>" + "9" * 5000 + "}": "asks for a width of 99999999999999999999…;",
    "{epochs:>{epochs}}": "has another placeholder in its format",
    "{}": "has a placeholder without a name, {}",
    "--epochs={}": "has a placeholder without a name, {}",
    "{0}": "has a numbered placeholder, {0}",
    "{epochs.real}": "is not a plain parameter name",
    "{": "has a brace that opens or closes no placeholder",
    "}": "has a brace that opens or closes no placeholder",
    "{epochs:>٣}": "not one Python reads",
    "{epochs!x}": "asks for the conversion !x",
}


@pytest.mark.parametrize(("text", "words"), REFUSED.items(), ids=range(len(REFUSED)))
def test_a_placeholder_that_is_not_a_bounded_named_value_is_refused_in_words(text, words):
    with pytest.raises(ParameterError) as refused:
        render(text, VALUES)

    assert words in str(refused.value)


@pytest.mark.parametrize(("text", "filled"), [
    ("--epochs={epochs:>4}", "--epochs=   3"), ("{lr:.4f}", "0.0010"), ("{epochs:0>64}", "0" * 63 + "3"),
    ("{{literal}} {mode}", "{literal} fast"), ("{mode!r}", "'fast'"), ("{epochs:+,}", "+3"),
])
def test_a_bounded_format_still_fills_in_as_python_formats_it(text, filled):
    assert render(text, VALUES) == filled


def test_a_value_longer_than_a_placeholder_may_fill_in_is_refused_as_it_is_filled():
    with pytest.raises(ParameterError, match=f"fills in {VALUE_MOST + 1:,} characters; a placeholder may fill in at most"):
        render("{mode}", {"mode": "x" * (VALUE_MOST + 1)})


def test_a_text_longer_than_an_argument_may_be_once_filled_in_is_refused():
    with pytest.raises(ParameterError, match=f"may be at most {RENDERED_MOST:,}"):
        render("{mode}" * (RENDERED_MOST // 1000 + 1), {"mode": "x" * 1000})


def test_a_format_that_does_not_suit_the_value_is_refused_in_words_not_raised_as_python_says_it():
    with pytest.raises(ParameterError, match=r"The placeholder \{mode:d\} does not suit the value fast of mode"):
        render("{mode:d}", VALUES)


# --- Saving a template: the page a lead uses, the API, the service --------------------------------


@pytest.mark.parametrize("args", ["--epochs\n{epochs:>1000000000}", "{}", "--epochs={}", "{0}", "{epochs:>{epochs}}", "{"])
def test_a_lead_saving_a_template_with_an_unbounded_or_nameless_placeholder_gets_the_form_back_in_words(lead, flavor,
                                                                                                     args):
    response = login(lead).post(reverse("jobs:template-create"), editor_form(owner_team="vision", args=args))

    assert response.status_code == 400
    page = response.content.decode()
    assert "placeholder" in page or "brace" in page
    assert not WorkloadTemplate.objects.exists()


def test_a_placeholder_in_an_environment_value_is_checked_when_the_template_is_saved(lead, flavor):
    response = login(lead).post(reverse("jobs:template-create"),
                                editor_form(owner_team="vision", env="WIDTH={epochs:>99999}"))

    assert response.status_code == 400
    assert "asks for a width of 99999" in response.content.decode()
    assert not WorkloadTemplate.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("args", ["--epochs", "{epochs:>100000000}"]), ("args", ["{}"]),
                                              ("env", {"EPOCHS": "{epochs:>100000000}"}), ("env", {"EPOCHS": "{0}"})])
def test_the_api_refuses_an_unbounded_or_nameless_placeholder_naming_the_field(admin_user, flavor, field, value):
    body: dict[str, Any] = {"slug": "wide", "name": "Wide", "kind": "training", "flavors": [flavor.slug],
                            "image": "pytorch/pytorch:2.5", "default_units": 1, "max_units": 4, field: value,
                            "parameters": [{"name": "epochs", "type": "int", "default": 3, "min": 1, "max": 100}]}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert "placeholder" in response.json()["message"]
    assert not WorkloadTemplate.objects.exists()


def test_a_revision_with_an_unbounded_placeholder_keeps_the_current_version(lead, team, flavor):
    template = services.template_create(user=lead, slug="t", name="T", kind=WorkloadKind.TRAINING, owner_team=team,
                                        flavors=[flavor], image="pytorch/pytorch:2.5", args=["{epochs}"],
                                        parameters=[{"name": "epochs", "type": "int", "default": 3, "min": 1, "max": 9}])

    with pytest.raises(DomainError, match="asks for a width of 100000000"):
        services.template_revise(user=lead, template=template, flavors=[flavor], image="pytorch/pytorch:2.5",
                                 args=["{epochs:>100000000}"], parameters=template.current.parameters)
    assert template.versions.count() == 1


def test_a_format_that_does_not_suit_its_parameter_is_refused_when_saved_not_at_every_launch(admin_user, flavor):
    with pytest.raises(DomainError, match=r"does not suit the value 2.5 of image_tag") as refused:
        services.template_create(user=admin_user, slug="t", name="T", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                 image="pytorch/pytorch:2.5", args=["{image_tag:d}"],
                                 parameters=[{"name": "image_tag", "type": "choice", "default": "2.5",
                                              "choices": ["2.4", "2.5"]}])
    assert refused.value.field == "args"


# --- A version saved before these rules ---------------------------------------------------------


def test_a_launch_from_a_version_saved_before_the_bound_fails_with_the_reason_and_builds_no_huge_argument(
        ready_team, member, training, flavor, django_capture_on_commit_callbacks):
    WorkloadTemplateVersion.objects.filter(pk=training.current.pk).update(args=["--epochs", "{epochs:>1000000000}"])
    training.refresh_from_db()

    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, parameters={"epochs": 3})

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    assert f"asks for a width of 1000000000; a placeholder's width and precision may be at most {FORMAT_MOST}" in (
        workload.reason)
