"""A real schema registry for the registry wire's tests: ``compose/registry-local/registry.sh``
(Apicurio Registry, built from Maven Central) started for the session, or the one
``TURNLOG_TEST_SCHEMA_REGISTRY_URL`` names."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnlog.kafka.registry import forget_prepared

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "compose" / "registry-local" / "registry.sh"
#: The tests' own port, away from a registry a person may run on 8081.
PORT = os.environ.get("REGISTRY_LOCAL_PORT", "18181")


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    configured = os.environ.get("TURNLOG_TEST_SCHEMA_REGISTRY_URL")
    if configured:
        yield configured
        return
    env = {**os.environ, "REGISTRY_LOCAL_PORT": PORT}
    status = subprocess.run(
        ["bash", str(SCRIPT), "status"], env=env, capture_output=True, check=False
    )
    started = status.returncode != 0
    run = subprocess.run(
        ["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        pytest.fail(f"could not start the local schema registry:\n{run.stderr}")
    try:
        yield run.stdout.strip()
    finally:
        if started:
            subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, check=False)


@pytest.fixture(autouse=True)
def _single_object_after() -> Iterator[None]:
    """Each test starts and ends with the process writing single-object records."""
    forget_prepared()
    yield
    forget_prepared()
