"""pytest fixtures for the real local control plane.

Load as a plugin from the project's top-level conftest (preferred; also registers the
``cluster`` marker):

    pytest_plugins = ["tests.cluster.fixtures"]

or import the fixture: ``from tests.cluster.fixtures import control_plane  # noqa: F401``.
Standalone: ``pytest -p tests.cluster.fixtures tests/cluster``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .harness import ControlPlane, ControlPlaneError, ensure_built


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs the real local Kubernetes control plane (etcd, kube-apiserver, Kueue, KWOK)")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A started ``ControlPlane`` shared by the whole session; stopped at the end.

    Builds the binaries first if they are not cached (slow, once); fails loudly if the
    build or the start fails. Nothing is skipped.
    """
    try:
        cache = ensure_built()
    except ControlPlaneError as e:
        pytest.fail(f"could not build the control plane: {e}", pytrace=False)
    cp = ControlPlane(cache, pod_run_seconds=float(os.environ.get("GPU_PORTAL_CP_POD_RUN_SECONDS", "2")))
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"could not start the control plane: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
