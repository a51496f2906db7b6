"""Shared steps of the ipam-address integration tests: pools, claims, and waiting for them."""

from __future__ import annotations

import asyncio
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.waiting import eventually

CLAIMS = resources.IP_ADDRESS_CLAIMS
ADDRESSES = resources.IP_ADDRESSES


def pool_ref(name: str, kind: str = "HybridIPPool") -> dict[str, str]:
    return {"apiGroup": kinds.IPAM_GROUP, "kind": kind, "name": name}


async def create_pool(kube: Kube, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": kinds.HYBRID_IPPOOL.resource.api_version,
        "kind": "HybridIPPool",
        "metadata": {"name": name},
        "spec": spec,
    }
    return await kube.create(kinds.HYBRID_IPPOOL.resource, body, namespace)


async def create_claim(
    kube: Kube,
    namespace: str,
    name: str,
    pool: dict[str, str],
    cluster: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"poolRef": pool}
    if cluster:
        spec["clusterName"] = cluster
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    body = {"apiVersion": CLAIMS.api_version, "kind": "IPAddressClaim", "metadata": meta, "spec": spec}
    return await kube.create(CLAIMS, body, namespace)


def ready(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), None)


async def bound_address(kube: Kube, namespace: str, claim: str, within: float = 60) -> str:
    """Wait until the claim is Ready with an addressRef, and return its IPAddress's address."""

    async def probe() -> str | None:
        obj = await kube.get(CLAIMS, claim, namespace)
        ref = ((obj or {}).get("status") or {}).get("addressRef") or {}
        condition = ready(obj)
        if not ref.get("name") or not condition or condition["status"] != "True":
            return None
        address = await kube.get(ADDRESSES, ref["name"], namespace)
        return str(address["spec"]["address"]) if address else None

    return await eventually(f"claim {claim} to be bound", probe, within=within)


async def claim_condition(
    kube: Kube, namespace: str, claim: str, reason: str, within: float = 60
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        condition = ready(await kube.get(CLAIMS, claim, namespace))
        return condition if condition and condition["reason"] == reason else None

    return await eventually(f"claim {claim} to report {reason}", probe, within=within)


async def addresses_in(kube: Kube, namespace: str) -> dict[str, str]:
    """Every IPAddress in the namespace: claim name → address."""
    return {a["metadata"]["name"]: a["spec"]["address"] for a in await kube.list(ADDRESSES, namespace)}


async def gone(
    kube: Kube, resource: resources.Resource, name: str, namespace: str, within: float = 60
) -> None:
    async def probe() -> bool:
        return await kube.get(resource, name, namespace) is None

    await eventually(f"{resource.kind} {name} to be gone", probe, within=within)


async def create_claims(kube: Kube, namespace: str, names: list[str], pool: dict[str, str]) -> None:
    await asyncio.gather(*(create_claim(kube, namespace, name, pool) for name in names))
