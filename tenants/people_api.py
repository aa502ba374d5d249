"""The People API (platform admins): `/api/people/`, the same reads and writes as the People
pages, decided by tenants/people.py. Everyone else gets 403, whatever the person."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal.adapters import StrictInputMixin, parse, require_perm, signed_in_user
from portal.models import ApiToken, User
from portal.serializers import ApiTokenSerializer
from tenants import people
from tenants.filters import PersonFilter
from tenants.models import Membership


class PersonMembershipSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)  # type: ignore[var-annotated]

    class Meta:
        model = Membership
        fields = ["team", "role"]
        read_only_fields = fields


class PersonSerializer(serializers.ModelSerializer):
    name = serializers.CharField(source="display_name", read_only=True)
    signs_in_with_sso = serializers.BooleanField(
        read_only=True, help_text="Single sign-on decides this account's roles and teams: they cannot be changed here.")
    teams = PersonMembershipSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = User
        fields = ["id", "username", "name", "email", "is_active", "is_platform_admin", "is_finance", "is_superuser",
                  "signs_in_with_sso", "last_login", "date_joined", "teams"]
        read_only_fields = fields


class PersonUpdateSerializer(StrictInputMixin, serializers.Serializer):
    refusals = {
        "is_superuser": "A superuser is made or unmade only in the Django admin.",
        "username": "A username does not change here.",
    }

    is_platform_admin = serializers.BooleanField(required=False, help_text="Not for an SSO account, nor for yourself.")
    is_finance = serializers.BooleanField(required=False, help_text="Not for an SSO account.")
    is_active = serializers.BooleanField(
        required=False, help_text="false deactivates: no sign-in, no API tokens. Not for yourself or a superuser.")


@extend_schema_view(
    list=extend_schema(description="Platform admins only: every account."),
    retrieve=extend_schema(description="Platform admins only."),
    partial_update=extend_schema(
        request=PersonUpdateSerializer, responses={200: PersonSerializer},
        description="Platform admins only. Roles of an SSO account come from its provider groups and are refused; "
                    "nobody takes away their own platform admin role or deactivates themselves. Audited."),
)
class PersonViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = PersonSerializer
    queryset = User.objects.none()
    filterset_class = PersonFilter
    http_method_names = ["get", "patch", "post", "head", "options"]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        require_perm(request.user, "portal.manage_people")

    def get_queryset(self) -> QuerySet[User]:
        if getattr(self, "swagger_fake_view", False):
            return self.queryset
        return people.people_for_user(user=self.request.user).prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("team").order_by("team__slug")))

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        person = self.get_object()
        data = parse(PersonUpdateSerializer, request)
        people.person_update(actor=signed_in_user(request), person=person,
                             roles={field: data[field] for field in people.ROLE_FIELDS if field in data},
                             active=data.get("is_active"))
        return Response(self.get_serializer(self.get_queryset().get(pk=person.pk)).data)

    @extend_schema(responses={200: ApiTokenSerializer(many=True)}, description="The person's API tokens, newest first.")
    @action(detail=True, methods=["get"], pagination_class=None)
    def tokens(self, request: Request, pk: str | None = None) -> Response:
        person = self.get_object()
        return Response(ApiTokenSerializer(ApiToken.objects.filter(user=person), many=True).data)

    @extend_schema(request=None, responses={200: ApiTokenSerializer},
                   description="Revokes one of the person's API tokens. Audited.")
    @action(detail=True, methods=["post"], url_path=r"tokens/(?P<token_id>[0-9]+)/revoke")
    def token_revoke(self, request: Request, pk: str | None = None, token_id: str | None = None) -> Response:
        person = self.get_object()
        token = get_object_or_404(ApiToken.objects.filter(user=person), pk=token_id)
        token = people.person_token_revoke(actor=signed_in_user(request), person=person, token=token)
        return Response(ApiTokenSerializer(token).data)


def register(router: BaseRouter) -> None:
    router.register("people", PersonViewSet, basename="person")
