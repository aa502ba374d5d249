"""The adapter kit every app's views and API endpoints share.

Pages: the typed htmx request and one paginator. API: pagination, strict input, request
parsing, objects named by slug among those the caller can see, list filters and one error
format. Filters: a flag and a "visible object named by its slug" filter, so every list treats a
team (or template) the caller cannot see the same way: as a filter that matches nothing.

Nothing here knows a model of another app: tenants and jobs subclass the generic pieces with
their own `for_user` querysets, because dependencies point from them to portal, never back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import django_filters
from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django_filters.rest_framework import DjangoFilterBackend
from django_htmx.middleware import HtmxDetails
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions, pagination, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import DomainError, RateLimited
from portal.models import User

PAGE_SIZE = 25
TRUE_VALUES = {"1", "true", "yes"}
FALSE_VALUES = {"0", "false", "no"}
# What FlagField reads, for the schema (JSON Schema has no case-insensitive flag): a client that
# sends `?active=` or `?active=True` is answered, so the schema must not call those invalid.
FLAG_PATTERN = "^(" + "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)
                              for word in sorted(TRUE_VALUES | FALSE_VALUES)) + ")?$"
# ASCII digits only: str.isdigit() also says yes to "²" and "①", which int() then refuses, and
# int() itself reads Arabic-Indic or full-width digits that nobody meant as a number here.
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")  # 18 digits stay below 2^63, what a database column holds


def whole_number(text: str | None) -> int | None:
    """The whole number written in ASCII digits, or None for anything else (signs, spaces, "²")."""
    text = (text or "").strip()
    return int(text) if WHOLE_NUMBER.fullmatch(text) else None


SIGNED_WHOLE_NUMBER = re.compile(r"[-+]?[0-9]{1,18}")
WHOLE_NUMBER_INVALID = "Enter a whole number. Write it in the digits 0 to 9."


def signed_whole_number(value: object) -> int | None:
    """A whole number typed in a form or sent in JSON, as whole_number reads one with an optional
    sign; None for anything else. Django's and DRF's IntegerField read "１２" as 12 and any number
    of digits, which a launch hint then multiplied into a price (a 500 at 40 digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 10**18 else None
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if SIGNED_WHOLE_NUMBER.fullmatch(text) else None


class WholeNumberField(forms.IntegerField):
    """A form's whole number, read by signed_whole_number; bounds and their messages as Django's."""

    default_error_messages = {"invalid": WHOLE_NUMBER_INVALID}

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        number = signed_whole_number(value)
        if number is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return number


class WholeNumberSerializerField(serializers.IntegerField):
    """The API's whole number, read by signed_whole_number: JSON's integers, or the same digits as text."""

    default_error_messages = {"invalid": WHOLE_NUMBER_INVALID}

    def to_internal_value(self, data: Any) -> int:
        number = signed_whole_number(data)
        if number is None:
            self.fail("invalid")
        return number


# The same reasoning for a number with decimals: Decimal() also reads "１２", "1_000", "NaN" and
# "Infinity", none of which a person typing an amount means. Thousands may be grouped by commas
# ("12,500.50"); "2,75" is no grouping, so it is refused rather than read as 275. An exponent of
# at most three ASCII digits is read ("1e6" is a million), so a column too small says so.
DECIMAL_NUMBER = re.compile(r"(?P<sign>[-+]?)(?P<whole>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)?(?:\.(?P<fraction>[0-9]*))?"
                            r"(?P<exponent>[eE][-+]?[0-9]{1,3})?")
DECIMAL_MOST_CHARACTERS = 1000  # far beyond any column; a longer text is not read at all


def decimal_number(text: str | None) -> Decimal | None:
    """The number written in ASCII digits with an optional sign, decimal point, commas between
    thousands and exponent, or None for anything else (NaN, "１２", "1_000", an empty text)."""
    text = (text or "").strip()
    match = DECIMAL_NUMBER.fullmatch(text) if len(text) <= DECIMAL_MOST_CHARACTERS else None
    if match is None or not (match["whole"] or match["fraction"]):
        return None
    fraction = f".{match['fraction']}" if match["fraction"] else ""
    return Decimal(f"{match['sign']}{(match['whole'] or '0').replace(',', '')}{fraction}{match['exponent'] or ''}")


# --- Pages -------------------------------------------------------------------------------------


def signed_in_user(request: HttpRequest) -> User:
    """The user behind a page or endpoint that requires a login (the admin, login_required views,
    the API behind IsAuthenticated).

    `request.user` is typed `User | AnonymousUser`; this narrows it for the services, which act for
    a person, and refuses rather than passing an anonymous user on if a login check was forgotten.
    """
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind login_required: its user is a User, never anonymous."""

    user: User  # login_required guarantees it; HttpRequest says User | AnonymousUser


class HtmxHttpRequest(AuthenticatedHttpRequest):
    """The same, with django-htmx's details of an htmx request (HtmxMiddleware sets them)."""

    htmx: HtmxDetails


def page(items: QuerySet[Any], number: str | None) -> Page:
    return Paginator(items, PAGE_SIZE).get_page(number)


def require_perm(user: Any, perm: str, obj: Any = None, *, refusal: str | None = None) -> None:
    """Refuses (403) unless the user holds the `rules` permission, on `obj` when given. The object
    was found among those the user can see, so another team's is already a 404; this is the
    "sees it but may not" answer. `refusal` says why, where the page shows it."""
    if not user.has_perm(perm, obj):
        raise PermissionDenied if refusal is None else PermissionDenied(refusal)


def add_refusal(form: forms.BaseForm, refusal: DomainError) -> None:
    """Shows a service's refusal on the form: next to the field it names when the form has that
    field, above the fields otherwise (a field the form does not show is no place for it)."""
    form.add_error(refusal.field if refusal.field in form.fields else None, refusal.message)


# --- Errors ------------------------------------------------------------------------------------


def error_sentences(detail: Any, *, keyed: bool = True, prefix: str = "") -> list[str]:
    """Validation errors as sentences; `keyed` names the field in front ("team: There is no ...")."""
    if isinstance(detail, Mapping):
        return [
            sentence
            for key, value in detail.items()
            for sentence in error_sentences(
                value, keyed=keyed, prefix=f"{key}: " if keyed and key not in ("non_field_errors", "detail") else ""
            )
        ]
    if isinstance(detail, list):
        return [sentence for item in detail for sentence in error_sentences(item, keyed=keyed, prefix=prefix)]
    return [f"{prefix}{detail}"]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error is `{"message": "...", "errors": {...}}` with a sentence at the top."""
    if isinstance(exc, DomainError):
        errors = {exc.field: [exc.message]} if exc.field else {}
        refusal = Response({"message": exc.message, "errors": errors}, status=exc.status_code)
        if isinstance(exc, RateLimited):
            refusal["Retry-After"] = str(exc.retry_after)
        return refusal
    if isinstance(exc, ValidationError):
        errors = exc.message_dict if hasattr(exc, "message_dict") else {"non_field_errors": exc.messages}
        return Response({"message": " ".join(error_sentences(errors)), "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied("You are not allowed to do this.")
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found, or not visible to you.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"message": " ".join(error_sentences(detail)), "errors": detail}
    else:
        message = detail.get("detail", detail) if isinstance(detail, dict) else detail
        response.data = {"message": str(message), "errors": {}}
    return response


# --- API input ---------------------------------------------------------------------------------



ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error: a sentence for the person, and the fields' own messages when input was refused.",
    "properties": {
        "message": {"type": "string"},
        "errors": {"type": "object", "additionalProperties": True},
    },
    "required": ["message", "errors"],
}
ERROR_RESPONSES = {
    "400": "The input was refused; `message` says why, `errors` names the fields.",
    "401": "No credentials, or a token that is unknown, revoked or expired.",
    "403": "Signed in, but not allowed to do this (a read-only token writing, a role that may not).",
    "404": "Not found, or not visible to you (another team's object answers 404, never 403).",
    "409": "The object is no longer in a state that allows this: someone else acted first.",
    "415": "The body is not JSON (or a form) the endpoint can read.",
    "429": "Over a rate: wait the seconds Retry-After gives.",
}
_WRITE_ONLY_ERRORS = {"409", "415", "429"}


def document_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation may answer with the one error format
    (`exception_handler`), so the schema says so instead of listing only the happy status."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    for name, component in schemas.items():
        # Request bodies are read by StrictInputMixin serializers: a field they do not accept is a 400.
        if name.endswith("Request") and component.get("type") == "object":
            component.setdefault("additionalProperties", False)
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            for parameter in operation.get("parameters", []):
                # DRF reads an empty query parameter (`?team=`) as one not given, never as a too-short value.
                schema = parameter.get("schema", {})
                if parameter.get("in") != "query" or parameter.get("required"):
                    continue
                if schema.get("minLength") == 1:
                    del schema["minLength"]
                if schema.get("type") == "string" and "format" in schema:
                    parameter["schema"] = {"anyOf": [schema, {"type": "string", "maxLength": 0}]}
                elif schema.get("type") == "string" and "enum" in schema and "" not in schema["enum"]:
                    schema["enum"] = [*schema["enum"], ""]  # `?status=`: any status
            responses = operation.setdefault("responses", {})
            for code, description in ERROR_RESPONSES.items():
                if code in _WRITE_ONLY_ERRORS and method == "get":
                    continue
                responses.setdefault(code, {"description": description, "content": reference})
    return result


class TokenScheme(OpenApiAuthenticationExtension):
    """Documents portal.tokens.TokenAuthentication in the OpenAPI schema."""

    target_class = "portal.tokens.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")


class Pagination(pagination.PageNumberPagination):
    """`?page=` and `?page_size=` (up to 200; more is read as 200). Anything but a whole number
    is a 400 that says so, not a silent first page of 50."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list[Any] | None:
        problems = {}
        size = request.query_params.get(self.page_size_query_param)
        if size is not None and (whole_number(size) or 0) < 1:
            problems[self.page_size_query_param] = [(f"page_size must be a whole number from 1 to {self.max_page_size}, "
                                                    f"not “{size}”.")]
        number = request.query_params.get(self.page_query_param)
        if number is not None and number not in self.last_page_strings and (whole_number(number) or 0) < 1:
            problems[self.page_query_param] = [f"page must be a whole number from 1, not “{number}”."]
        if problems:
            raise exceptions.ValidationError(problems)
        return super().paginate_queryset(queryset, request, view)


class StrictInputMixin:
    """Refuses fields the endpoint does not accept: a client that sends `status` or `slug`
    learns it cannot change them instead of believing it did."""

    refusals: ClassVar[dict[str, str]] = {}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            writable = [name for name, field in fields.items() if not field.read_only]
            refused = [key for key in data if key not in writable]
            if refused:
                accepted = ", ".join(writable)
                raise serializers.ValidationError(
                    {key: [self.refusals.get(key, f"{key} cannot be set here; this endpoint accepts {accepted}.")]
                     for key in refused}
                )
        return super().to_internal_value(data)  # type: ignore[misc]


def parse(serializer_class: type[serializers.Serializer], request: Request, **kwargs: Any) -> dict[str, Any]:
    """The request body, validated by the serializer (400 with sentences when it is not valid)."""
    serializer = serializer_class(data=request.data, context={"request": request}, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


@extend_schema_field(OpenApiTypes.STR)
class VisibleSlugField(serializers.SlugRelatedField):
    """An object named by its slug, among those the caller can see: one that exists but is not
    visible gets the same answer as one that does not exist."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "Its slug.")
        super().__init__(slug_field="slug", **kwargs)

    def visible(self, user: Any) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        request = self.context.get("request")
        return self.visible(request.user if request else None)


# --- List filters ------------------------------------------------------------------------------


class ListFilterBackend(DjangoFilterBackend):
    """django-filter for lists only: a detail URL names its object, and a stray query parameter
    must neither hide it nor turn its answer into a 400."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        if getattr(view, "action", "list") != "list":
            return queryset
        return super().filter_queryset(request, queryset, view)


class FlagField(forms.Field):
    """1/true/yes or 0/false/no, in any case, or empty for either; anything else (spaces
    included) is refused rather than quietly ignored. FLAG_PATTERN documents exactly this."""

    def to_python(self, value: Any) -> bool | None:
        text = str(value or "").lower()
        if not text:
            return None
        if text in TRUE_VALUES:
            return True
        if text in FALSE_VALUES:
            return False
        raise ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value})


def _documented(list_filter: django_filters.Filter, schema_type: str, **schema: Any) -> None:
    """drf-spectacular cannot guess a custom filter's type, and a type given on the class drops
    the help text; given on the filter itself, with the help text, it keeps both."""
    extend_schema_field({"type": schema_type, "description": str(list_filter.extra.get("help_text", "")),
                         **schema})(list_filter)


class FlagFilter(django_filters.Filter):
    field_class = FlagField

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _documented(self, "string", pattern=FLAG_PATTERN)

    @property
    def field(self) -> forms.Field:
        if not hasattr(self, "_field"):
            self.extra.setdefault("error_messages", {"invalid": f"{self.field_name} is 1 or 0, not “%(value)s”."})
        return super().field

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        return qs if value is None else super().filter(qs, value)


class VisibleSlugFilter(django_filters.CharFilter):
    """Rows of the object with this slug, among those the caller can see. An object the caller
    cannot see matches nothing, exactly like one that does not exist: the list is empty, so a
    filter never tells whether it exists. Subclasses say what the caller can see."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _documented(self, "string")

    def visible(self, user: Any) -> QuerySet[Any]:
        raise NotImplementedError

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if not value:
            return qs
        user = getattr(self.parent, "request", None) and self.parent.request.user
        wanted = self.visible(user).filter(slug=value).values("pk")
        return qs.filter(**{f"{self.field_name}__in": wanted})


def choice_errors(noun: str, values: list[str]) -> dict[str, str]:
    """The refusal of a value that is not one of the choices, naming them."""
    return {"invalid_choice": f"“%(value)s” is not a {noun}; choose one of {', '.join(values)}."}
