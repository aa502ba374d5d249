"""Templates that run a data scientist's own work: an image from allowed registries, a list of
arguments, variables from declared names. Each bounded, never a pod spec; hostile values are
refused with words, and what is allowed lands in the manifest exactly."""

from __future__ import annotations

import pytest

from jobs import kinds, services
from jobs.models import WorkloadKind
from jobs.parameters import ParameterError, check_declarations, validate_parameters
from portal.errors import DomainError
from tests.helpers import launch

pytestmark = pytest.mark.django_db

WORK = [
    {"name": "image", "type": "image", "default": "quay.io/acme/train:1", "prefixes": ["quay.io/acme"]},
    {"name": "extra_args", "type": "args", "max_items": 4, "max_length": 64},
    {"name": "settings", "type": "env", "names": ["DATA_DIR", "WANDB_PROJECT"]},
    {"name": "epochs", "type": "int", "default": 1, "min": 1, "max": 10},
]


@pytest.fixture
def own_work(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="own-work", name="Your own training", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", command=["python"], args=["main.py", "--epochs", "{epochs}"], env={"DATA_DIR": "/data"},
        default_units=1, max_units=4, parameters=WORK,
    )


def test_the_chosen_image_arguments_and_variables_land_in_the_container_exactly(ready_team, member, own_work, flavor):
    workload = launch(member, ready_team, own_work, flavor, parameters={
        "image": "quay.io/acme/experiments/resnet:2026-11", "extra_args": ["--lr", "0.1; rm -rf /"],
        "settings": {"WANDB_PROJECT": "vision", "DATA_DIR": "/data/imagenet"}, "epochs": 3})

    (job,) = kinds.workload_objects(spec=services.workload_spec(workload))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["command"], container["args"]) == (
        "quay.io/acme/experiments/resnet:2026-11", ["python"], ["main.py", "--epochs", "3", "--lr", "0.1; rm -rf /"])
    assert container["env"] == [{"name": "DATA_DIR", "value": "/data/imagenet"}, {"name": "WANDB_PROJECT", "value": "vision"}]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_form_takes_arguments_and_variables_one_per_line(ready_team, member, own_work, flavor):
    values = validate_parameters(declared=own_work.current.parameters, given={
        "extra_args": "--lr\r\n0.1\n\n", "settings": "DATA_DIR=/data/a=b\nWANDB_PROJECT=x"})
    assert values["extra_args"] == ["--lr", "0.1"]
    assert values["settings"] == {"DATA_DIR": "/data/a=b", "WANDB_PROJECT": "x"}
    assert values["image"] == "quay.io/acme/train:1"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"image": "ghcr.io/evil/miner:1"}, "image: the image ghcr.io/evil/miner:1 is not under quay.io/acme"),
        ({"image": "quay.io/acme-evil/x:1"}, "is not under quay.io/acme"),
        ({"image": "quay.io/acme/x:1 --privileged"}, "is not a container image reference"),
        ({"extra_args": ["a", "b", "c", "d", "e"]}, "extra_args takes at most 4 arguments, not 5"),
        ({"extra_args": ["x" * 65]}, "an argument may be at most 64 characters"),
        ({"extra_args": ["ok", "line\nbreak"]}, "may not hold control characters"),
        ({"extra_args": "--flag", "settings": {"LD_PRELOAD": "/tmp/x.so"}},
         "this template lets you set DATA_DIR, WANDB_PROJECT, not “LD_PRELOAD”"),
        ({"settings": "DATA_DIR"}, "write each variable as NAME=value"),
        ({"settings": {"DATA_DIR": 5}}, "DATA_DIR must be text"),
        ({"settings": ["DATA_DIR=/x"]}, "must be variables and their values"),
    ],
)
def test_hostile_values_are_refused_with_words_and_nothing_is_recorded(ready_team, member, own_work, flavor, given, words):
    with pytest.raises(DomainError, match=words.replace("(", r"\(")) as refused:
        launch(member, ready_team, own_work, flavor, parameters=given)
    assert refused.value.field == "parameters"
    assert not ready_team.workloads.exists()


def test_an_image_under_the_templates_prefix_must_still_be_on_the_admins_allow_list(ready_team, member, admin_user, flavor,
                                                                                  settings):
    template = services.template_create(
        user=admin_user, slug="loose", name="Loose", kind=WorkloadKind.TRAINING, flavors=[flavor], image="quay.io/acme/t:1",
        default_units=1, max_units=4, parameters=[{"name": "image", "type": "image", "default": "quay.io/acme/t:1"}])

    with pytest.raises(DomainError, match="The image ghcr.io/acme/t:1 is not from an allowed registry"):
        launch(member, ready_team, template, flavor, parameters={"image": "ghcr.io/acme/t:1"})


@pytest.mark.parametrize(
    ("declared", "words"),
    [
        ([{"name": "s", "type": "env", "names": ["LD_PRELOAD"]}], "A template may not set LD_PRELOAD"),
        ([{"name": "s", "type": "env"}], "must declare the variable names people may set"),
        ([{"name": "a", "type": "args", "max_items": 500}], "max_items must be a whole number from 1 to 50"),
        ([{"name": "i", "type": "image", "default": "quay.io/a:1", "prefixes": ["not a registry"]}], "prefixes are registries"),
        ([{"name": "i", "type": "image", "default": "quay.io/a:1"}, {"name": "j", "type": "image", "default": "quay.io/a:1"}],
         "one image, not several"),
    ],
)
def test_a_template_declaring_an_unbounded_or_dangerous_work_parameter_is_refused(declared, words):
    with pytest.raises(ParameterError, match=words):
        check_declarations(declared)


def test_a_list_parameter_can_never_be_spliced_into_an_argument(ready_team, member, admin_user, flavor):
    with pytest.raises(DomainError, match=r"refers to \{extra\}, which is not one of its parameters"):
        template = services.template_create(
            user=admin_user, slug="splice", name="Splice", kind=WorkloadKind.TRAINING, flavors=[flavor],
            image="quay.io/acme/t:1", args=["--opts={extra}"], default_units=1, max_units=4,
            parameters=[{"name": "extra", "type": "args"}])
        launch(member, ready_team, template, flavor, parameters={"extra": ["a"]})
    assert not ready_team.workloads.exists()
