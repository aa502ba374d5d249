"""Flavors whose unit asks for several resources (issue 24 §2): what the catalog page and the API
accept and refuse in words, how the team's queue reads back in units, what a waiting launch is
short of in units, and how many units a node pool offers by its scarcest resource."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import services as job_services
from portal.models import AuditEvent
from tenants import cluster_selectors, nodes
from tenants.models import Flavor, GpuNode
from tenants.queueing.base import QueueUsage
from tenants.queueing.kueue import waiting_reason
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db

CORE = {"name": "aliyun.com/gpu-core.percentage", "per_unit": 25}


def cgpu_flavor(**fields: Any) -> Flavor:
    return FlavorFactory.create(**{"name": "A10 cGPU 1/4", "slug": "a10-cgpu-4", "resource_name": "aliyun.com/gpu-mem",
                                   "resource_per_unit": 6, "extra_resources": [CORE], "sharing_mode": "gpu-memory",
                                   "fraction_denominator": 4, **fields})


def cgpu_form(**changes: Any) -> dict[str, Any]:
    data = {"name": "A10 cGPU 1/4", "slug": "a10-cgpu-4", "resource_name": "aliyun.com/gpu-mem", "resource_per_unit": "6",
            "extra_resources": '[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25}]',
            "sharing_mode": "gpu-memory", "gpu_model": "NVIDIA A10 24GB", "fraction_numerator": "1",
            "fraction_denominator": "4", "capacity_units": "16", "node_labels": '{"ack.node.gpu.schedule": "core_mem"}',
            "tolerations": "[]", "is_active": "on"}
    data.update(changes)
    return data


def test_an_admin_adds_a_cgpu_flavor_whose_unit_asks_for_memory_and_compute_and_the_catalog_says_so(admin_user):
    client = login(admin_user)
    response = client.post(reverse("tenants:flavor-create"), cgpu_form())
    assert response.status_code == 302
    flavor = Flavor.objects.get(slug="a10-cgpu-4")
    assert flavor.pod_requests(3) == {"aliyun.com/gpu-mem": 18, "aliyun.com/gpu-core.percentage": 75}
    page = client.get(reverse("tenants:flavor-list")).content.decode()
    assert "a unit asks for 6 <code>aliyun.com/gpu-mem</code> + 25 <code>aliyun.com/gpu-core.percentage</code>" in page
    assert AuditEvent.objects.filter(action="flavor.created", object_id=str(flavor.pk)).exists()


@pytest.mark.parametrize(("typed", "said"), [
    ('{"name": "aliyun.com/gpu-core.percentage"}', "Other resources are a list of objects"),
    ('[{"name": "cpu", "per_unit": 2}]', "“cpu” is not an extended resource name with a domain"),
    ('[{"name": "aliyun.com/gpu-mem", "per_unit": 2}]', "aliyun.com/gpu-mem is named twice"),
    ('[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 0}]', "per_unit is a whole number of at least 1"),
    ('[{"name": "aliyun.com/gpu-core.percentage", "per_unit": "25"}]', "per_unit is a whole number of at least 1"),
    ('[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25, "per_device": "yes"}]', "per_device is true or false"),
    ('[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25, "limit": 1}]', "Unknown key(s) limit"),
    ('[{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25', "Enter a valid JSON"),
])
def test_other_resources_that_are_not_resources_are_refused_in_words_and_nothing_is_saved(admin_user, typed, said):
    response = login(admin_user).post(reverse("tenants:flavor-create"), cgpu_form(extra_resources=typed))
    assert response.status_code == 400
    assert said in response.content.decode()
    assert not Flavor.objects.filter(slug="a10-cgpu-4").exists()


def test_a_unit_of_none_of_its_resource_is_refused(admin_user):
    response = login(admin_user).post(reverse("tenants:flavor-create"), cgpu_form(resource_per_unit="0"))
    assert response.status_code == 400 and not Flavor.objects.filter(slug="a10-cgpu-4").exists()


def test_the_api_takes_and_gives_the_resources_a_unit_asks_for(admin_user):
    body = {"name": "T4 vGPU 1/4", "slug": "t4-vgpu-4", "resource_name": "nvidia.com/gpu", "sharing_mode": "vgpu",
            "gpu_model": "NVIDIA T4 16GB", "fraction_numerator": 1, "fraction_denominator": 4, "capacity_units": 32,
            "node_labels": {"gpu": "on"},
            "extra_resources": [{"name": "nvidia.com/gpumem", "per_unit": 4096, "per_device": True}]}
    created = api(admin_user).post("/api/flavors/", body, format="json")
    assert created.status_code == 201, created.json()
    shown = api(admin_user).get(f"/api/flavors/{created.json()['id']}/").json()
    assert (shown["resource_per_unit"], shown["extra_resources"]) == (1, body["extra_resources"])
    other = {**body, "slug": "t4-other", "name": "T4 other", "extra_resources": [{"name": "gpumem"}]}
    refused = api(admin_user).post("/api/flavors/", other, format="json")
    assert refused.status_code == 400 and "not an extended resource name" in str(refused.json())


def test_a_queue_is_read_back_in_units_of_the_flavors_own_resource():
    cgpu = cgpu_flavor()
    rows = [QueueUsage(flavor="a10-cgpu-4", resource="aliyun.com/gpu-mem", guaranteed=24, in_use=18, borrowed=6, lent=0,
                       idle=6),
            QueueUsage(flavor="a10-cgpu-4", resource="aliyun.com/gpu-core.percentage", guaranteed=100, in_use=75,
                       borrowed=25, lent=0, idle=25),
            QueueUsage(flavor="gone", resource="nvidia.com/gpu", guaranteed=1, in_use=0, borrowed=0, lent=0)]
    assert cluster_selectors.in_units(rows, {cgpu.slug: cgpu}) == [
        QueueUsage(flavor="a10-cgpu-4", resource="aliyun.com/gpu-mem", guaranteed=4, in_use=3, borrowed=1, lent=0, idle=1),
        rows[2],  # a flavor the catalog does not know stays as the queue says it
    ]


def test_what_a_waiting_launch_is_short_of_is_said_in_units():
    message = ("couldn't assign flavors to pod set main: insufficient unused quota for aliyun.com/gpu-mem in flavor "
               "a10-cgpu-4, 12 more needed")
    assert "are 2 units short" in waiting_reason(message, {"aliyun.com/gpu-mem": 6})
    assert "are 12 units short" in waiting_reason(message)
    unmapped = ("spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName: Not found: \"DeviceClass "
                "tpu.example.com is not mapped in DRA configuration for podset main\"")
    assert waiting_reason(unmapped).startswith("Waiting: Kueue does not count devices of the DeviceClass tpu.example.com")


def test_a_pool_offers_the_units_its_scarcest_resource_gives(admin_user):
    cgpu = cgpu_flavor(node_labels={"pool": "cgpu"}, capacity_units=8)
    # 48 GiB of memory make 8 units, but 150 % of compute (a card's quarter unhealthy) only 6.
    GpuNode.objects.create(name="cgpu-0", labels={"pool": "cgpu"}, ready=True, changed_at=timezone.now(),
                           gpus={"aliyun.com/gpu-mem": [48, 48], "aliyun.com/gpu-core.percentage": [200, 150]})
    (pool,) = [p for p in nodes.nodes_picture().pools if p.flavor == cgpu]
    assert (pool.capacity, pool.offered, pool.unhealthy, pool.short) == (8, 6, 2, True)


def test_the_launch_hint_says_what_one_unit_of_a_cgpu_flavor_is(ready_team, member, training, admin_user):
    cgpu = cgpu_flavor(node_labels={"ack.node.gpu.schedule": "core_mem"})
    job_services.template_revise(user=admin_user, template=training, flavors=[*training.current.flavors.all(), cgpu])
    query = (f"?team={ready_team.slug}&template={training.pk}&flavor={cgpu.slug}&units=2&p_epochs=10"
             "&p_learning_rate=0.001&p_image_tag=2.5")
    hint = login(member).get(reverse("jobs:launch-hint") + query).content.decode()
    assert "Each unit is 6 aliyun.com/gpu-mem + 25 aliyun.com/gpu-core.percentage." in hint


def test_a_flavor_claimed_through_a_device_class_asks_for_one_device_a_unit_and_nothing_else(admin_user):
    client = login(admin_user)
    dra = cgpu_form(slug="h100-dra", name="H100 DRA", resource_name="dra.nvidia.com/gpu", resource_per_unit="1",
                    extra_resources="[]", device_class_name="gpu.nvidia.com", sharing_mode="exclusive",
                    fraction_denominator="1")
    refused = client.post(reverse("tenants:flavor-create"), {**dra, "extra_resources": '[{"name": "x.io/y", "per_unit": 1}]'})
    assert refused.status_code == 400
    assert "A unit claimed through a DeviceClass is one of its devices" in refused.content.decode()
    badly_named = client.post(reverse("tenants:flavor-create"), {**dra, "device_class_name": "GPU_NVIDIA"})
    assert badly_named.status_code == 400 and "A DeviceClass name is lowercase letters" in badly_named.content.decode()
    assert not Flavor.objects.filter(slug="h100-dra").exists()
    assert client.post(reverse("tenants:flavor-create"), dra).status_code == 302
    flavor = Flavor.objects.get(slug="h100-dra")
    assert flavor.pod_requests(2) == {}  # its pods claim devices instead of asking the device plugin
    page = client.get(reverse("tenants:flavor-list")).content.decode()
    assert "claims devices of the DeviceClass <code>gpu.nvidia.com</code>" in page
