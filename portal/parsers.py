"""The API's body parsers, and the one rule on text every request follows: no NUL character.
Their own module because DRF reads DEFAULT_PARSER_CLASSES while `rest_framework.views` loads,
which portal.adapters imports: a parser there would be a circular import."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import IO, Any

from rest_framework import exceptions, parsers

# Deeper than any body an endpoint accepts (a template's parameters are three levels down), and
# far from the depth at which Python's own recursion gives out.
MAX_JSON_DEPTH = 64


def _holds_nul(value: Any) -> bool:
    """Whether any text in a parsed body (keys included) holds a NUL, walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def nul_field(fields: Iterable[tuple[str, Any]]) -> str | None:
    """The first field whose name or value holds a NUL character (code 0), or None.

    PostgreSQL refuses such text in any statement, a query's parameters included, with an error:
    a team's slug with a NUL in a query string was a 500 wherever it reached a lookup (form
    choices, the API's slug fields, the template reference). No text the portal keeps or looks up
    can hold one, so every request is held to this before anything reads it: the query string,
    the cookies and forms (portal.security.RefuseNulMiddleware) and the API's bodies (below)."""
    for name, value in fields:
        if _holds_nul(name) or _holds_nul(value):
            return name.replace("\x00", "\\0")
    return None


def nul_refusal(field: str) -> str:
    return f"“{field}” holds a NUL character (code 0), which no text in the portal may contain; remove it and send again."


def _refuse_nul(fields: Iterable[tuple[str, Any]]) -> None:
    field = nul_field(fields)
    if field is not None:
        raise exceptions.ValidationError({field: [nul_refusal(field)]})


def _json_depth(value: Any) -> int:
    """How deeply lists and objects nest, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_DEPTH:
                stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing bodies nested deeper than MAX_JSON_DEPTH: the json module
    recurses once per level and gives out (RecursionError, a 500) at about a thousand."""

    def parse(self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = None
        else:
            if _json_depth(data) <= MAX_JSON_DEPTH:
                _refuse_nul(data.items() if isinstance(data, dict) else [("body", data)])
                return data
        raise exceptions.ParseError(f"The JSON is nested too deeply; no request needs more than {MAX_JSON_DEPTH} levels.")


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refusing a field that holds a NUL (see nul_field). Form bodies
    (urlencoded) are held to it before they reach DRF, by the middleware that checks every form."""

    def parse(self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        _refuse_nul(parsed.data.lists())
        return parsed
