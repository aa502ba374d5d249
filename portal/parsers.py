"""The API's body parsers, and the one rule on text every request follows: nothing the database
cannot keep (a NUL, a lone surrogate).
Their own module because DRF reads DEFAULT_PARSER_CLASSES while `rest_framework.views` loads,
which portal.adapters imports: a parser there would be a circular import."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import IO, Any

from rest_framework import exceptions, parsers

# Deeper than any body an endpoint accepts (a template's parameters are three levels down), and
# far from the depth at which Python's own recursion gives out.
MAX_JSON_DEPTH = 64


_SURROGATE = re.compile("[\ud800-\udfff]")


def _flaw(value: Any) -> str | None:
    """What in a value (a parsed body's text, keys included, walked without recursion) no text
    may hold, in words, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a NUL character (code 0)"
            if _SURROGATE.search(item):
                return "half of a UTF-16 surrogate pair (\\ud800 to \\udfff), which is not a character alone"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def text_refusal(fields: Iterable[tuple[str, Any]]) -> tuple[str, str] | None:
    """The first field whose name or value holds what no text may hold, with a sentence saying
    so; None when every field is text the database can keep.

    PostgreSQL refuses a NUL (code 0) in any statement, a query's parameters included, and a
    lone surrogate cannot even be encoded to send: either was a 500 wherever it reached a lookup
    (a team's slug in the launch page's query string, the API's template field). No text the
    portal keeps or looks up can hold one, so every request is held to this before anything
    reads it: the path, query string, cookies and forms (portal.security.RefuseUnreadableTextMiddleware)
    and the API's bodies (below); only JSON's escapes can spell a surrogate."""
    for name, value in fields:
        in_name = _flaw(name)
        flaw = in_name or _flaw(value)
        if flaw is not None:
            shown = name.encode("unicode_escape").decode("ascii") if in_name else name  # the name itself, printable
            return shown, f"“{shown}” holds {flaw}, which no text in the portal may contain; remove it and send again."
    return None


def _refuse_unreadable(fields: Iterable[tuple[str, Any]]) -> None:
    refusal = text_refusal(fields)
    if refusal is not None:
        field, message = refusal
        raise exceptions.ValidationError({field: [message]})


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
                _refuse_unreadable(data.items() if isinstance(data, dict) else [("body", data)])
                return data
        raise exceptions.ParseError(f"The JSON is nested too deeply; no request needs more than {MAX_JSON_DEPTH} levels.")


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refusing a field whose text the database cannot keep (see
    text_refusal). Urlencoded bodies are held to it before they reach DRF, by the middleware that
    checks every form."""

    def parse(self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        _refuse_unreadable(parsed.data.lists())
        return parsed
