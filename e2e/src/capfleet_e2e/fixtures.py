"""Per-test fixtures on top of the session's cluster: an API client, a fresh namespace, operators.

Imported by `capfleet_e2e.plugin`, so every test in the workspace can request them.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube, KubeError
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
    await release_leftovers(kube, name)


# What may carry a finalizer in a test's namespace: capfleet's kinds, held Secrets, CAPI objects around them.
HELD: tuple[resources.Resource, ...] = (
    *(kind.resource for kind in kinds.ALL if kind.resource.namespaced),
    resources.SECRETS,  # held by capfleet objects (capfleet.secretholds)
    resources.ROLEBINDINGS,  # deploy/tenant's, held with the Secrets they let the operators read
    resources.CAPI_CLUSTERS,
    resources.CAPI_MACHINES,
    resources.IP_ADDRESS_CLAIMS,
    resources.IP_ADDRESSES,
    resources.KCPS,
    resources.MACHINE_DEPLOYMENTS,
    resources.MACHINE_SETS,
    resources.KUBEADM_CONFIGS,
)


async def release_leftovers(kube: Kube, namespace: str) -> None:
    """Drop the finalizers of what is left in a deleted test namespace.

    The test's operators are stopped before its namespace is deleted (fixtures tear down in reverse), so
    nothing would ever remove their finalizers: the namespace would stay Terminating for the rest of the
    session and the namespace controller would re-list and re-delete its contents over and over, load that
    slowed the session's last suites (the real-node VMs) measurably. What a test asserts about deletion it
    asserts before this point.
    """
    for resource in HELD:
        try:
            found = await kube.list(resource, namespace)
        except KubeError:  # a CRD this session did not install
            continue
        for obj in found:
            if obj["metadata"].get("finalizers"):
                with contextlib.suppress(KubeError):
                    patch = {"metadata": {"finalizers": None}}
                    await kube.patch(resource, obj["metadata"]["name"], patch, namespace)


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
