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
from pathlib import Path
from typing import Any

import pytest

from .harness import ControlPlane, ControlPlaneError, ensure_built


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs the real local Kubernetes control plane (etcd, kube-apiserver, Kueue, KWOK)")


def _started(cache: Path, **options: Any) -> Iterator[ControlPlane]:
    # GPU_PORTAL_CP_VERBOSITY raises the components' log levels, with GPU_PORTAL_CP_KEEP_WORKDIR to read them after.
    cp = ControlPlane(cache, pod_run_seconds=float(os.environ.get("GPU_PORTAL_CP_POD_RUN_SECONDS", "2")),
                      verbosity=int(os.environ.get("GPU_PORTAL_CP_VERBOSITY", "1")), **options)
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"could not start the control plane: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


def _built() -> Path:
    try:
        return ensure_built()
    except ControlPlaneError as e:
        pytest.fail(f"could not build the control plane: {e}", pytrace=False)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A started ``ControlPlane`` shared by the whole session; stopped at the end.

    Builds the binaries first if they are not cached (slow, once); fails loudly if the
    build or the start fails. Nothing is skipped.
    """
    yield from _started(_built())


@pytest.fixture(scope="session")
def volcano_control_plane() -> Iterator[ControlPlane]:
    """A started ``ControlPlane`` whose queue backend is Volcano (its scheduler and controller
    manager, built by build-volcano.sh on first use) instead of Kueue; shared by the session."""
    yield from _started(_built(), queue_backend="volcano")
