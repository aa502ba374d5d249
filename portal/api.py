"""What every API endpoint shares: pagination and errors a person can act on."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import exceptions, pagination, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import DomainError


class TokenScheme(OpenApiAuthenticationExtension):
    """Documents portal.tokens.TokenAuthentication in the OpenAPI schema."""

    target_class = "portal.tokens.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")


class Pagination(pagination.PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [m for key, value in detail.items() for m in _flatten(value, "" if key in ("non_field_errors", "detail") else f"{key}: ")]
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    return [f"{prefix}{detail}"]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error is `{"message": "...", "errors": {...}}` with a sentence at the top."""
    if isinstance(exc, DomainError):
        errors = {exc.field: [exc.message]} if exc.field else {}
        return Response({"message": exc.message, "errors": errors}, status=exc.status_code)
    if isinstance(exc, ValidationError):
        errors = exc.message_dict if hasattr(exc, "message_dict") else {"non_field_errors": exc.messages}
        return Response({"message": " ".join(_flatten(errors)), "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied("You are not allowed to do this.")
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found, or not visible to you.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"message": " ".join(_flatten(detail)), "errors": detail}
    else:
        message = detail.get("detail", detail) if isinstance(detail, dict) else detail
        response.data = {"message": str(message), "errors": {}}
    return response
