"""CAPI and capfleet objects for the glue's integration tests, and the steps that wait on them.

In these tests the test plays CAPI (Cluster, Machine and their status) and, where named, the child
operators (a child's status); ipam-address runs for real. The end-to-end suites in e2e/ run everything
for real.
"""

from __future__ import annotations

from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.waiting import eventually

CLUSTERS = resources.CAPI_CLUSTERS
MACHINES = resources.CAPI_MACHINES
HYBRID_MACHINES = kinds.HYBRID_MACHINE.resource
HYBRID_CLUSTERS = kinds.HYBRID_CLUSTER.resource
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
POOL = {"apiGroup": kinds.IPAM_GROUP, "kind": "HybridIPPool", "name": "nodes"}
GLUE_ENV = {"CAPFLEET_GLUE_RESYNC_SECONDS": "600"}
"""A resync far longer than any wait in the tests: progress must come from wake-ups, not polling."""


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == type_), None)


def ready_condition(status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


async def create_pool(kube: Kube, namespace: str) -> None:
    body = {
        "apiVersion": kinds.HYBRID_IPPOOL.resource.api_version,
        "kind": "HybridIPPool",
        "metadata": {"name": POOL["name"]},
        "spec": {"addresses": ["10.77.0.10-10.77.0.20"], "prefix": 24, "gateway": "10.77.0.1"},
    }
    await kube.create(kinds.HYBRID_IPPOOL.resource, body, namespace)


async def create_cluster(kube: Kube, namespace: str, name: str, **hybrid_spec: Any) -> dict[str, Any]:
    """A Cluster and its HybridCluster, owned by it as CAPI would make them; returns the HybridCluster."""
    cluster = await kube.create(
        CLUSTERS,
        {
            "apiVersion": CLUSTERS.api_version,
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": kinds.INFRASTRUCTURE_GROUP,
                    "kind": "HybridCluster",
                    "name": name,
                }
            },
        },
        namespace,
    )
    owner = {
        "apiVersion": CLUSTERS.api_version,
        "kind": "Cluster",
        "name": name,
        "uid": cluster["metadata"]["uid"],
    }
    return await kube.create(
        HYBRID_CLUSTERS,
        {
            "apiVersion": HYBRID_CLUSTERS.api_version,
            "kind": "HybridCluster",
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: name}, "ownerReferences": [owner]},
            "spec": hybrid_spec,
        },
        namespace,
    )


async def set_cluster_status(kube: Kube, namespace: str, name: str, **initialization: bool) -> None:
    await kube.patch_status(CLUSTERS, name, {"initialization": initialization}, namespace)


async def create_machine(
    kube: Kube,
    namespace: str,
    name: str,
    cluster: str,
    spec: dict[str, Any],
    *,
    control_plane: bool,
    data_secret: str | None = None,
    failure_domain: str | None = None,
) -> dict[str, Any]:
    """A Machine and the HybridMachine it owns, as CAPI clones them; returns the HybridMachine."""
    labels = {CLUSTER_LABEL: cluster}
    if control_plane:
        labels["cluster.x-k8s.io/control-plane"] = ""
    machine_spec: dict[str, Any] = {
        "clusterName": cluster,
        "bootstrap": {"dataSecretName": data_secret}
        if data_secret
        else {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
        "infrastructureRef": {"apiGroup": kinds.INFRASTRUCTURE_GROUP, "kind": "HybridMachine", "name": name},
    }
    if failure_domain:
        machine_spec["failureDomain"] = failure_domain
    machine = await kube.create(
        MACHINES,
        {
            "apiVersion": MACHINES.api_version,
            "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": machine_spec,
        },
        namespace,
    )
    owner = {
        "apiVersion": MACHINES.api_version,
        "kind": "Machine",
        "name": name,
        "uid": machine["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return await kube.create(
        HYBRID_MACHINES,
        {
            "apiVersion": HYBRID_MACHINES.api_version,
            "kind": "HybridMachine",
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster}, "ownerReferences": [owner]},
            "spec": spec,
        },
        namespace,
    )


async def machine_condition(
    kube: Kube, namespace: str, name: str, type_: str, reason: str, within: float = 30
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        found = condition(await kube.get(HYBRID_MACHINES, name, namespace), type_)
        return found if found and found["reason"] == reason else None

    return await eventually(f"HybridMachine {name} {type_} reason {reason}", probe, within=within)


async def child(
    kube: Kube, resource: resources.Resource, namespace: str, name: str, within: float = 30
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        return await kube.get(resource, name, namespace)

    return await eventually(f"{resource.kind} {name} to exist", probe, within=within)
