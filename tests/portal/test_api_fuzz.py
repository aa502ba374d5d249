"""Schemathesis over every operation of the OpenAPI schema, as each role (member, lead, finance,
platform admin) with its own API token: valid input (positive) and input the schema forbids
(negative). No answer may be a server error, an undocumented status or content type, or a body
that breaks its schema; and what the schema forbids must be refused.

The suite runs PORTAL_FUZZ_EXAMPLES (default 2) cases per operation, role and mode, the same ones
every run (derandomized: a CI run once failed inside Hypothesis itself, CPython 3.11's ast.parse
raising "AST constructor recursion depth mismatch" while naming a lambda of a deeply nested draw,
on cases no other run drew); `make fuzz` runs 25 fresh ones. The cases a run generated are printed."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter, defaultdict
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.renderers import JSONRenderer
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal import tokens
from tests.helpers import file_request, launch

EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "2"))
FRESH = "PORTAL_FUZZ_EXAMPLES" in os.environ  # `make fuzz`: new cases each run
CONFORMANCE = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
               response_schema_conformance]
# Valid data may still be refused for what a schema cannot say (a team that does not exist, a
# month with nothing to close): that is a documented 4xx, so positive_data_acceptance is not asked.
CHECKS = {GenerationMode.POSITIVE: CONFORMANCE, GenerationMode.NEGATIVE: [*CONFORMANCE, negative_data_rejection]}


@pytest.fixture
def tokens_by_role(ready_team, member, lead, finance_user, admin_user, training, flavor, other_team, outsider):
    """A site with something in it: a workload, a quota request, two teams; a token per role."""
    launch(member, ready_team, training, flavor)
    file_request(ready_team, member, flavor)
    users = {"member": member, "lead": lead, "finance": finance_user, "platform admin": admin_user}
    return {role: tokens.api_token_create(user=user, name="fuzz", expires_in_days=1)[1] for role, user in users.items()}


def fuzz_operation(operation: Any, *, mode: GenerationMode, secret: str, failures: dict[str, set[str]],
                   cases: Counter[str]) -> None:
    where = f"{mode.value} {operation.method.upper()} {operation.path}"

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=not FRESH)
    def run(case: Any) -> None:
        cases[mode.value] += 1
        try:
            case.call_and_validate(headers={"Authorization": f"Token {secret}"}, checks=CHECKS[mode])
        except (Exception, BaseExceptionGroup) as failure:  # a failed check raises a FailureGroup
            failures[where].add(str(failure)[:1500])

    with contextlib.suppress(Unsatisfiable):  # nothing the schema forbids can be sent (a GET without parameters)
        run()


@pytest.fixture
def connection_kept():
    """Schemathesis calls Django's own WSGIHandler, whose request signals close the database
    connection of a test that runs inside a transaction (on PostgreSQL; SQLite keeps an in-memory
    one). Django's test client disconnects them for that reason; so does this test."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.mark.usefixtures("connection_kept")
def test_no_operation_answers_any_role_with_a_server_error_or_outside_its_schema(tokens_by_role):
    raw = json.loads(JSONRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = WSGIHandler()
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), [r for r in results if not isinstance(r, Ok)]
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    failures: dict[str, set[str]] = defaultdict(set)
    cases: Counter[str] = Counter()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for secret in tokens_by_role.values():
            for operation in operations:
                fuzz_operation(operation, mode=mode, secret=secret, failures=failures, cases=cases)

    print(f"\n{len(operations)} operations x {len(tokens_by_role)} roles: {sum(cases.values())} cases ({dict(cases)})")
    assert len(operations) > 50
    assert cases[GenerationMode.NEGATIVE.value] > 0
    assert not failures, "\n\n".join(f"== {where}\n{next(iter(found))}" for where, found in sorted(failures.items()))
