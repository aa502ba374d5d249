"""Errors a service raises when a request cannot be carried out as asked.

`DomainError` carries a sentence meant for the person who asked: the pages show it inline and
the API returns it as JSON with status 400 (409 for a state conflict, 429 with Retry-After
when the caller is over a rate).
"""

from __future__ import annotations


class DomainError(Exception):
    status_code = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class StateConflict(DomainError):
    """The object is no longer in a state that allows this (someone else acted first)."""

    status_code = 409



class NotAllowed(DomainError):
    """A refusal worth explaining (403): how the caller signed in may not do this, and the
    sentence says what would. Plain `PermissionDenied` stays for refusals that explain nothing."""

    status_code = 403


class RateLimited(DomainError):
    """Too many attempts: the API answers 429 with Retry-After, the pages show the sentence."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
