"""Objects written as their controllers would leave them, for tests of what reads them (the CLI, the
console) without running those controllers."""

from __future__ import annotations

from typing import Any

from capfleet import resources
from capfleet.kube import Kube


async def paused_cluster(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """A CAPI Cluster (paused: no manager acts on it); returns the controller ownerReference to it."""
    body = {
        "apiVersion": resources.CAPI_CLUSTERS.api_version,
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"paused": True},
    }
    cluster = await kube.create(resources.CAPI_CLUSTERS, body, namespace)
    return {
        "apiVersion": resources.CAPI_CLUSTERS.api_version,
        "kind": "Cluster",
        "name": name,
        "uid": cluster["metadata"]["uid"],
        "controller": True,
    }
