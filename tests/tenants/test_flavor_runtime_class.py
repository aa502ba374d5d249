"""A flavor's runtime class (issue 24 §4): the RuntimeClass its node pool needs, named as
Kubernetes names one, edited wherever a flavor is, and checked against the cluster itself, so
the catalog flags a flavor whose RuntimeClass the cluster lacks."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from portal.kube import KubeError, ObjectRef
from portal.models import AuditEvent
from tenants import catalog, cluster_selectors, services
from tenants.models import Flavor
from tests.conftest import login
from tests.helpers import api
from tests.tenants.test_platform_pages import flavor_form

pytestmark = pytest.mark.django_db

RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


@pytest.mark.parametrize("name", ["nvidia", "kata-qemu", "nvidia.cdi.k8s.io", "a" * 253])
def test_a_runtime_class_name_is_a_dns_subdomain(flavor, name):
    flavor.runtime_class_name = name
    flavor.full_clean()


@pytest.mark.parametrize("name, words", [
    ("NVIDIA", "lowercase letters, digits"), ("nvidia_runtime", "lowercase letters, digits"),
    ("-nvidia", "starting and ending with a letter or digit"), ("nvidia.", "DNS-1123 subdomain"),
    ("a" * 254, "at most 253 characters"), ("nvidia runtime", "lowercase letters"),
])
def test_a_runtime_class_name_kubernetes_would_refuse_is_refused_in_words(flavor, name, words):
    flavor.runtime_class_name = name
    with pytest.raises(ValidationError) as refused:
        flavor.full_clean()
    assert words in " ".join(refused.value.message_dict["runtime_class_name"])


def test_an_admin_sets_a_runtime_class_on_the_catalog_page_and_it_is_audited_and_shown(admin_user, flavor, simulated):
    simulated.apply(RUNTIME_CLASS)
    client = login(admin_user)
    response = client.post(reverse("tenants:flavor-edit", args=[flavor.slug]), flavor_form(
        name=flavor.name, slug=flavor.slug, capacity_units="16", node_labels='{"gpu-portal.io/flavor": "h100-80gb"}',
        runtime_class_name="nvidia"))
    assert response.status_code == 302
    flavor.refresh_from_db()
    assert flavor.runtime_class_name == "nvidia"
    assert "runtime_class_name  → nvidia" in AuditEvent.objects.get(action="flavor.updated").message
    page = client.get(reverse("tenants:flavor-list")).content.decode()
    assert 'data-testid="runtime-class">runtime class <code>nvidia</code>' in page
    assert 'data-testid="runtime-class-missing"' not in page


def test_a_bad_runtime_class_on_the_page_is_refused_and_saves_nothing(admin_user, flavor):
    response = login(admin_user).post(reverse("tenants:flavor-edit", args=[flavor.slug]), flavor_form(
        name=flavor.name, slug=flavor.slug, capacity_units="16", runtime_class_name="Nvidia"))
    assert response.status_code == 400 and "A RuntimeClass name is lowercase letters" in response.content.decode()
    flavor.refresh_from_db()
    assert flavor.runtime_class_name == ""


def test_the_catalog_flags_a_flavor_whose_runtime_class_the_cluster_lacks_and_says_so_once_it_is_there(
        admin_user, flavor, simulated):
    flavor.runtime_class_name = "nvidia"
    flavor.save()
    client = login(admin_user)
    expected = ("H100 80GB cannot run anything: its pods run with the RuntimeClass “nvidia”, which the cluster does not "
                "have, and the API server refuses every pod that names a missing one.")
    for url in (reverse("tenants:flavor-list"), reverse("tenants:flavor-edit", args=[flavor.slug])):
        page = client.get(url).content.decode()
        assert 'data-testid="runtime-class-missing"' in page and expected in page
    # Read from the cluster at every visit, never remembered: once the RuntimeClass is there the
    # flag is gone, and it is back as soon as the RuntimeClass is deleted.
    simulated.apply(RUNTIME_CLASS)
    assert 'data-testid="runtime-class-missing"' not in client.get(reverse("tenants:flavor-list")).content.decode()
    simulated.delete(ObjectRef("node.k8s.io/v1", "RuntimeClass", "nvidia"))
    assert 'data-testid="runtime-class-missing"' in client.get(reverse("tenants:flavor-list")).content.decode()


def test_a_cluster_that_does_not_answer_is_said_so_not_taken_for_a_missing_runtime_class(
        admin_user, flavor, simulated, monkeypatch):
    flavor.runtime_class_name = "nvidia"
    flavor.save()

    def unreachable(*args, **kwargs):
        raise KubeError("connection refused")

    monkeypatch.setattr(simulated, "list", unreachable)
    flags = cluster_selectors.runtime_class_flags(flavors=[flavor])
    assert flags == {flavor.pk: "The portal could not check that the cluster has the RuntimeClass “nvidia” H100 80GB's "
                                "pods run with (connection refused); try again in a minute."}


def test_flavors_without_a_runtime_class_cost_no_cluster_read(flavor, simulated, monkeypatch):
    monkeypatch.setattr(simulated, "list", lambda *a, **k: pytest.fail("read the cluster"))
    assert cluster_selectors.missing_runtime_classes(flavors=[flavor]) == {}


def test_the_api_reads_and_writes_a_flavors_runtime_class(admin_user, flavor):
    client = api(admin_user)
    response = client.patch(f"/api/flavors/{flavor.pk}/", {"runtime_class_name": "nvidia"}, format="json")
    assert response.status_code == 200 and response.json()["runtime_class_name"] == "nvidia"
    refused = client.patch(f"/api/flavors/{flavor.pk}/", {"runtime_class_name": "NVIDIA"}, format="json")
    assert refused.status_code == 400 and "A RuntimeClass name is lowercase letters" in str(refused.json())
    flavor.refresh_from_db()
    assert flavor.runtime_class_name == "nvidia"


def test_the_django_admin_edits_a_flavors_runtime_class(admin_user, flavor):
    page = login(admin_user).get(reverse("admin:tenants_flavor_change", args=[flavor.pk])).content.decode()
    assert 'name="runtime_class_name"' in page


def test_no_preset_names_a_runtime_class_and_the_nvidia_ones_say_when_to(flavor):
    # Whether pods need NVIDIA's runtime class is the site's container runtime's choice, not the GPU's.
    assert all(preset.form_initial()["runtime_class_name"] == "" for preset in catalog.PRESETS)
    for preset in catalog.PRESETS:
        assert (catalog.NVIDIA_RUNTIME_NOTE in preset.note) == preset.gpu_model.startswith("NVIDIA")


def test_the_catalog_file_may_set_a_runtime_class(flavor):
    services.catalog_apply(entries=[{"preset": "nvidia-h100", "slug": "h100-k3s", "name": "H100 on K3s", "capacity_units": 8,
                                     "node_labels": {"pool": "k3s"}, "runtime_class_name": "nvidia"}])
    assert Flavor.objects.get(slug="h100-k3s").runtime_class_name == "nvidia"
