"""The rate card API: `/api/billing/rates/` and `/api/billing/idle-policies/`.

Read by those who read costs (`portal.read_costs`); a price is set through
`billing.rates.services.rate_set` and a flavor's idle policy through `idle_policy_set`, which
decide who may.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.rates import selectors, services
from billing.rates.serializers import IdlePolicySerializer, IdlePolicySetSerializer, RateCreateSerializer, RateSerializer
from billing.rules import require_costs
from portal.adapters import parse, signed_in_user
from tenants.models import Flavor


class RateListView(APIView):
    @extend_schema(responses={200: RateSerializer(many=True)},
                   description="Every price, newest first per flavor. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        require_costs(request.user)
        return Response(RateSerializer(selectors.rate_history(), many=True).data)

    @extend_schema(request=RateCreateSerializer, responses={201: RateSerializer},
                   description="A new price from now or a later moment; finance and platform admins.")
    def post(self, request: Request) -> Response:
        require_costs(request.user)
        rate = services.rate_set(actor=signed_in_user(request), **parse(RateCreateSerializer, request))
        return Response(RateSerializer(rate).data, status=status.HTTP_201_CREATED)


def _idle_policy_body(row: selectors.IdlePolicyRow) -> dict[str, str]:
    return {"flavor": row.flavor.slug, "mode": row.mode, "mode_label": row.label}


class IdlePolicyListView(APIView):
    @extend_schema(responses={200: IdlePolicySerializer(many=True)},
                   description="What happens to each flavor's unallocated capacity. Finance and platform admins.")
    def get(self, request: Request) -> Response:
        require_costs(request.user)
        return Response(IdlePolicySerializer([_idle_policy_body(row) for row in selectors.idle_policy_rows()],
                                             many=True).data)

    @extend_schema(request=IdlePolicySetSerializer, responses={200: IdlePolicySerializer},
                   description="Sets one flavor's idle policy (audited); finance and platform admins.")
    def post(self, request: Request) -> Response:
        require_costs(request.user)
        data = parse(IdlePolicySetSerializer, request)
        services.idle_policy_set(actor=signed_in_user(request), flavor=data["flavor"], mode=data["mode"])
        [row] = selectors.idle_policy_rows(flavors=Flavor.objects.filter(pk=data["flavor"].pk))
        return Response(IdlePolicySerializer(_idle_policy_body(row)).data)
