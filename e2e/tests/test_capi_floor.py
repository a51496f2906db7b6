"""Cluster API's floor for `make bench-fleet`: CAPD's in-memory backend (capfleet_e2e.bench.floor) run
next to the session's real CAPI managers makes a one-replica KubeadmControlPlane and a MachineDeployment
of in-memory Machines Running, and a deleted Cluster takes every Machine with it. If this breaks, the
bench's floor is not CAPI's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.bench.floor import Capd, floor_cluster
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
WORKERS = 3


@pytest.fixture(scope="module")
def capd(control_plane: Cluster, capi: CapiManagers) -> Iterator[Capd]:
    del capi  # only needed running
    assert isinstance(control_plane, ControlPlane)
    with Capd(control_plane) as running:
        yield running


async def machines(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return await kube.list(resources.CAPI_MACHINES, namespace)


async def all_running(kube: Kube, namespace: str, count: int) -> list[dict[str, Any]] | None:
    found = await machines(kube, namespace)
    running = [m for m in found if (m.get("status") or {}).get("phase") == "Running"]
    return found if len(found) == count and len(running) == count else None


async def test_in_memory_machines_reach_running_and_go_with_their_cluster(
    capd: Capd, control_plane: Cluster, kube: Kube, namespace: str
) -> None:
    objects = floor_cluster(namespace, "floor", WORKERS)
    control_plane.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    found = await eventually(
        "every in-memory Machine Running", lambda: all_running(kube, namespace, WORKERS + 1), 180, 1
    )
    assert all((m["status"].get("initialization") or {}).get("infrastructureProvisioned") for m in found)
    assert all(m["status"].get("nodeRef") for m in found)
    capd.check_alive()
    control_plane.kubectl("delete", "clusters.cluster.x-k8s.io", "floor", "-n", namespace, "--wait=false")
    await eventually("the Machines to be gone", lambda: _none_left(kube, namespace), 120, 1)


async def _none_left(kube: Kube, namespace: str) -> bool:
    return not await machines(kube, namespace)
