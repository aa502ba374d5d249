"""Small helpers the test modules share."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from tenants import services
from tenants.models import Flavor, QuotaRequest, Team


def api(user: Any = None) -> APIClient:
    """An API client, logged in as the user when one is given."""
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


def file_request(team: Team, requester: Any, flavor: Flavor, units: int = 4, **options: Any) -> QuotaRequest:
    """A quota request filed through the service, as the form and the API would."""
    return services.quota_request_create(
        requester=requester, team=team, lines=[services.LineInput(flavor=flavor, units=units)],
        justification=options.pop("justification", "Fine-tuning the detector"), **options,
    )
