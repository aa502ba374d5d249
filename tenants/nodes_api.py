"""The GPU nodes behind the catalog (platform admins): `/api/nodes/`, what the nodes page shows,
as the last node check kept it (tenants/nodes.py). Everyone else gets 403."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal.adapters import require_perm
from tenants import nodes
from tenants.models import GpuNode


class NodeWorkloadSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    team = serializers.CharField(help_text="The team's slug.")
    units = serializers.IntegerField(help_text="GPU units its pods hold on this node.")


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField(source="node.name")
    flavors = serializers.ListField(source="flavor_names", child=serializers.CharField(),
                                    help_text="The active flavors that select it, by name.")
    gpus = serializers.DictField(
        source="node.gpus", child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="Per GPU resource it advertises: [capacity, allocatable]. Allocatable below capacity: unhealthy devices.")
    unhealthy = serializers.IntegerField(source="node.unhealthy", help_text="Devices it has but cannot hand out.")
    ready = serializers.BooleanField(source="node.ready")
    cordoned = serializers.BooleanField(source="node.cordoned", help_text="Nothing new starts on it.")
    sharing = serializers.CharField(help_text="How its GPUs are shared, as GPU Feature Discovery labels it; empty: not said.")
    taints = serializers.ListField(source="taint_words", child=serializers.CharField())
    labels = serializers.DictField(source="node.labels", child=serializers.CharField(),
                                   help_text="Its GPU labels and those the catalog's flavors select by.")
    workloads = NodeWorkloadSerializer(many=True, help_text="The portal's workloads with a pod running on it.")
    changed_at = serializers.DateTimeField(source="node.changed_at", help_text="When a node check last found it changed.")


@extend_schema_view(list=extend_schema(description="Platform admins only: every GPU node, and every node a flavor selects, "
                                                   "as the last node check (every minute) read it."))
class NodeViewSet(viewsets.GenericViewSet):
    serializer_class = NodeSerializer
    queryset = GpuNode.objects.none()  # for the schema: the rows come from nodes.nodes_picture()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        require_perm(request.user, "tenants.manage_flavors")

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(nodes.nodes_picture().rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


def register(router: BaseRouter) -> None:
    router.register("nodes", NodeViewSet, basename="node")
