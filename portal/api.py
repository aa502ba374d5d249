"""API endpoints of the portal itself: the caller's own notifications and API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import notifications as notification_services
from portal import tokens as token_services
from portal.adapters import parse, signed_in_user
from portal.filters import NotificationFilter
from portal.models import ApiToken, Notification
from portal.serializers import ApiTokenCreatedSerializer, ApiTokenSerializer, NotificationSerializer


class NotificationViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = NotificationSerializer
    queryset = Notification.objects.none()
    filterset_class = NotificationFilter

    def get_queryset(self) -> Any:
        return Notification.objects.for_user(self.request.user)

    @extend_schema(request=None, responses={200: NotificationSerializer})
    @action(detail=True, methods=["post"])
    def read(self, request: Request, pk: str | None = None) -> Response:
        note = self.get_object()
        notification_services.notifications_mark_read(user=signed_in_user(request), notification_id=note.pk)
        note.refresh_from_db()
        return Response(self.get_serializer(note).data)

    @extend_schema(
        request=None,
        responses={200: inline_serializer("NotificationsMarkedRead", {"marked_read": serializers.IntegerField()})},
    )
    @action(detail=False, methods=["post"], url_path="read-all")
    def read_all(self, request: Request) -> Response:
        return Response({"marked_read": notification_services.notifications_mark_read(user=signed_in_user(request))})


class ApiTokenViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ApiTokenSerializer
    queryset = ApiToken.objects.none()

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return self.queryset
        return ApiToken.objects.filter(user=signed_in_user(self.request))

    @extend_schema(request=ApiTokenSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse(ApiTokenSerializer, request)
        token, secret = token_services.api_token_create(
            user=signed_in_user(request), name=data["name"], expires_in_days=data["expires_in_days"],
            scope=data.get("scope", ApiToken.Scope.WRITE),
            created_with=request.auth if isinstance(request.auth, ApiToken) else None,
        )
        return Response(dict(ApiTokenCreatedSerializer(token).data, secret=secret), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = token_services.api_token_revoke(token=self.get_object(), actor=signed_in_user(request))
        return Response(self.get_serializer(token).data)


def register(router: BaseRouter) -> None:
    router.register("notifications", NotificationViewSet, basename="notification")
    router.register("tokens", ApiTokenViewSet, basename="token")
