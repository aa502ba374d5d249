"""The portal's REST API over HTTP with an API token: the standard library only. Every failure is a
CliError with words for a person and the exit code a script can test."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

# Exit codes: what a script may branch on.
OK, REFUSED, USAGE, NOT_SIGNED_IN, FORBIDDEN, NOT_FOUND, UNREACHABLE, SERVER = 0, 1, 2, 3, 4, 5, 6, 7
TIMEOUT_SECONDS = 30


class CliError(Exception):
    def __init__(self, message: str, code: int = REFUSED) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def _words(body: bytes) -> str:
    """The API's refusal in its own words: `detail`, or each field's messages."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:300]
    if isinstance(data, dict):
        if isinstance(data.get("detail"), str):
            return data["detail"]
        parts = []
        for field, messages in data.items():
            shown = " ".join(_flatten(messages))
            parts.append(shown if field in ("non_field_errors", "__all__") else f"{field}: {shown}")
        return "; ".join(parts)
    return " ".join(_flatten(data))


def _flatten(value: Any) -> list[str]:
    if isinstance(value, list):
        return [text for item in value for text in _flatten(item)]
    if isinstance(value, dict):
        return [f"{key}: {text}" for key, item in value.items() for text in _flatten(item)]
    return [str(value)]


@dataclass
class Client:
    url: str
    token: str

    def request(self, method: str, path: str, *, body: Any = None, query: dict[str, Any] | None = None,
                raw: bool = False) -> Any:
        address = self.url.rstrip("/") + path
        if query:
            address += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(address, data=data, method=method, headers={
            "Authorization": f"Token {self.token}", "Accept": "*/*" if raw else "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - the user's portal
                payload = response.read()
        except urllib.error.HTTPError as error:
            words = _words(error.read())
            if error.code == 401:
                raise CliError(f"The portal did not accept your token ({words}); sign in again with "
                               "`gpu-portal login`.", NOT_SIGNED_IN) from None
            if error.code == 403:
                raise CliError(words or "You may not do that.", FORBIDDEN) from None
            if error.code == 404:
                raise CliError(words if words and words != "Not found." else f"Not found: {path}", NOT_FOUND) from None
            if error.code >= 500:
                raise CliError(f"The portal failed ({error.code}): {words}", SERVER) from None
            raise CliError(words or f"Refused ({error.code}).", REFUSED) from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise CliError(f"Could not reach the portal at {self.url}: {reason}", UNREACHABLE) from None
        if raw:
            return payload
        return json.loads(payload) if payload else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body if body is not None else {})

    def all(self, path: str, **query: Any) -> list[dict[str, Any]]:
        """Every item of a paginated list, page after page."""
        items: list[dict[str, Any]] = []
        page: Any = self.get(path, **query)
        while True:
            if isinstance(page, list):
                return items + page
            items += page.get("results", [])
            following = page.get("next")
            if not following:
                return items
            parts = urllib.parse.urlsplit(following)
            page = self.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
