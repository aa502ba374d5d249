"""Factories for the domain. Build what a test needs in one line; nothing else is created.

`TeamFactory()` and `TeamFactory.create()` do the same; mypy knows only that the second returns a
Team, so a test that hands the object to typed code (a service, a selector) spells it that way.
"""

from __future__ import annotations

import factory
from django.utils import timezone

from portal.models import User
from tenants.models import (
    Flavor,
    Membership,
    QuotaGrant,
    QuotaRequest,
    QuotaRequestLine,
    Team,
)


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class TeamFactory(factory.django.DjangoModelFactory[Team]):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.replace("-", " ").title())
    cost_center = "CC-100"


class MembershipFactory(factory.django.DjangoModelFactory[Membership]):
    class Meta:
        model = Membership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


class FlavorFactory(factory.django.DjangoModelFactory[Flavor]):
    class Meta:
        model = Flavor
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"GPU {n}")
    slug = factory.Sequence(lambda n: f"gpu-{n}")
    resource_name = "nvidia.com/gpu"
    gpu_model = "NVIDIA H100 80GB HBM3"
    capacity_units = 16
    node_labels = factory.LazyAttribute(lambda f: {"gpu-portal.io/flavor": f.slug})


class QuotaRequestFactory(factory.django.DjangoModelFactory[QuotaRequest]):
    class Meta:
        model = QuotaRequest

    team = factory.SubFactory(TeamFactory)
    requester = factory.SubFactory(UserFactory)
    justification = "Training the next model"


class QuotaRequestLineFactory(factory.django.DjangoModelFactory[QuotaRequestLine]):
    class Meta:
        model = QuotaRequestLine

    request = factory.SubFactory(QuotaRequestFactory)
    flavor = factory.SubFactory(FlavorFactory)
    units = 4


class QuotaGrantFactory(factory.django.DjangoModelFactory[QuotaGrant]):
    class Meta:
        model = QuotaGrant

    team = factory.SubFactory(TeamFactory)
    flavor = factory.SubFactory(FlavorFactory)
    units = 4
    valid_from = factory.LazyFunction(timezone.now)
