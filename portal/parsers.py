"""The API's JSON parser. Its own module because DRF reads DEFAULT_PARSER_CLASSES while
`rest_framework.views` loads, which portal.adapters imports: a parser there would be a circular import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework import exceptions, parsers

# Deeper than any body an endpoint accepts (a template's parameters are three levels down), and
# far from the depth at which Python's own recursion gives out.
MAX_JSON_DEPTH = 64


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
                return data
        raise exceptions.ParseError(f"The JSON is nested too deeply; no request needs more than {MAX_JSON_DEPTH} levels.")
