"""Per-test fixtures on top of the session's cluster: an API client, a fresh namespace, operators.

Imported by `capfleet_e2e.plugin`, so every test in the workspace can request them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.operators import OperatorProcess

RunOperator = Callable[..., OperatorProcess]


@pytest.fixture
async def kube(kubeconfig: Path) -> AsyncIterator[Kube]:
    """capfleet's typed API client, as the admin of the session's cluster."""
    async with Kube.connect("capfleet-tests", str(kubeconfig)) as client:
        yield client


@pytest.fixture
async def namespace(kube: Kube, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A namespace of the test's own, deleted (with everything in it) afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    await kube.create(
        resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    await kube.delete(resources.NAMESPACES, name)


@pytest.fixture
def run_operator(kubeconfig: Path) -> Iterator[RunOperator]:
    """Start operators as subprocesses (`python -m <module>`); all are stopped after the test."""
    started: list[OperatorProcess] = []
    log_dir = artifacts_dir() / "operators"
    log_dir.mkdir(parents=True, exist_ok=True)

    def run(
        module: str,
        *,
        namespaces: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> OperatorProcess:
        process = OperatorProcess(
            module, str(kubeconfig), log_dir, namespaces=namespaces, extra_args=extra_args, env=env
        )
        started.append(process)
        return process.start()

    yield run
    for process in started:
        process.stop()
