"""Serving one IPAddressClaim: find its pool, choose or recover its address, write the IPAddress.

Level-triggered and idempotent: every trigger (a new claim, a restart, a lost status, an IPAddress
deleted by hand) runs the same `reconcile`, which derives everything from the claim, the pool and the
IPAddress objects. A claim whose IPAddress was deleted by hand is served again with the address the
deleted object held (`preferred`), so it gets the same address back; a wiped status is rebuilt from the
IPAddress that still exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import conditions, errors, ownership, pausing, resources
from capfleet.conditions import Update
from capfleet.kube import Kube
from ipam_address import netbox_pools, spaces
from ipam_address.allocator import Allocator, Owner
from ipam_address.pools import GROUP, IN_CLUSTER, PoolInfo, PoolKey, key_of_ref, space_of

PROTECT_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"

POOL_NOT_READY = "PoolNotReady"
POOL_EXHAUSTED = "PoolExhausted"
ALLOCATION_FAILED = "AllocationFailed"


@dataclass(frozen=True)
class Lookups:
    """Read-only views of kopf's indexes, as plain functions (so logic does not depend on kopf)."""

    pool: Callable[[PoolKey], PoolInfo | None]
    owner: Callable[[PoolKey], Owner]
    address_of_claim: Callable[[str, str], tuple[str, bool] | None]
    """The address of a claim's IPAddress, and whether that IPAddress is being deleted."""


@dataclass
class Outcome:
    """What a reconcile decided: the claim's status to write."""

    status: dict[str, Any] = field(default_factory=dict)


def pool_key(claim: Mapping[str, Any]) -> PoolKey | None:
    return key_of_ref(claim["metadata"]["namespace"], (claim.get("spec") or {}).get("poolRef"))


def cluster_name(claim: Mapping[str, Any]) -> str | None:
    return (claim.get("spec") or {}).get("clusterName") or ownership.cluster_name(claim["metadata"])


async def is_paused(kube: Kube, claim: Mapping[str, Any]) -> bool:
    """Paused by the claim's own annotation or by its Cluster; a Cluster that is gone pauses nothing."""
    if pausing.hands_off(claim["metadata"]):
        return True
    name = cluster_name(claim)
    if not name:
        return False
    return pausing.cluster_paused(
        await kube.get(resources.CAPI_CLUSTERS, name, claim["metadata"]["namespace"])
    )


def status_with(claim: Mapping[str, Any], *updates: Update, address_ref: str | None = None) -> dict[str, Any]:
    current = claim.get("status") or {}
    generation = claim["metadata"].get("generation")
    status: dict[str, Any] = {
        "conditions": conditions.to_wire(
            conditions.apply_all(conditions.parse(current.get("conditions")), updates, generation=generation)
        )
    }
    if address_ref is not None:
        status["addressRef"] = {"name": address_ref}
    return status


def ip_address_body(claim: Mapping[str, Any], pool: PoolInfo, address: str) -> dict[str, Any]:
    meta = ownership.child_metadata(claim["metadata"]["name"], claim)
    meta["ownerReferences"].append(pool.owner_reference())
    meta["finalizers"] = [PROTECT_FINALIZER]
    spec: dict[str, Any] = {
        "claimRef": {"name": claim["metadata"]["name"]},
        "poolRef": {"apiGroup": GROUP, "kind": pool.key.kind, "name": pool.key.name},
        "address": address,
        "prefix": int(pool.spec.get("prefix") or 0),
    }
    if pool.spec.get("gateway"):
        spec["gateway"] = pool.spec["gateway"]
    return {
        "apiVersion": resources.IP_ADDRESSES.api_version,
        "kind": "IPAddress",
        "metadata": meta,
        "spec": spec,
    }


def ready_pool(lookups: Lookups, key: PoolKey) -> PoolInfo:
    pool = lookups.pool(key)
    if pool is None:
        raise errors.DependencyMissing(f"{key.describe()} does not exist", reason=POOL_NOT_READY)
    if pool.deleting:
        raise errors.DependencyMissing(f"{key.describe()} is being deleted", reason=POOL_NOT_READY)
    return pool


async def allocate_in_cluster(
    kube: Kube,
    allocator: Allocator,
    lookups: Lookups,
    claim: Mapping[str, Any],
    pool: PoolInfo,
    preferred: str | None = None,
) -> str | None:
    """Create the claim's IPAddress in an in-cluster pool; None when the pool has no free address."""
    name = claim["metadata"]["name"]
    try:
        space = space_of(pool)
    except errors.InvalidSpec as exc:
        raise errors.DependencyMissing(
            f"{pool.key.describe()} is invalid: {exc.message}", reason=POOL_NOT_READY
        ) from exc
    owner: Owner = lookups.owner(pool.key)
    address = allocator.reserve(pool.key, space, name, owner, preferred=preferred)
    if address is None:
        return None
    try:
        created, _ = await kube.create_or_get(
            resources.IP_ADDRESSES, ip_address_body(claim, pool, address), claim["metadata"]["namespace"]
        )
    except Exception:
        allocator.settle(pool.key, address)
        raise
    actual = spaces.canonical(created["spec"]["address"])
    if actual != address:  # an IPAddress from an earlier attempt exists: it wins
        allocator.settle(pool.key, address)
    return actual


async def allocate_in_netbox(
    kube: Kube, clients: netbox_pools.Clients, claim: Mapping[str, Any], pool: PoolInfo
) -> str | None:
    """Create the claim's IPAddress from the NetBox address it owns or is given; None when all are full."""
    if not pool.ready:
        raise errors.DependencyMissing(
            f"{pool.key.describe()} is not ready: {pool.message}", reason=POOL_NOT_READY
        )
    addressing = await clients.for_pool(kube, pool)
    allocated = await netbox_pools.allocate(addressing, claim, pool, cluster_name(claim))
    if allocated is None:
        return None
    body = ip_address_body(claim, pool, spaces.canonical(allocated.ip))
    body["spec"]["prefix"] = allocated.prefix_length
    created, _ = await kube.create_or_get(resources.IP_ADDRESSES, body, claim["metadata"]["namespace"])
    return spaces.canonical(created["spec"]["address"])


async def reconcile(
    kube: Kube,
    allocator: Allocator,
    netbox_clients: netbox_pools.Clients,
    lookups: Lookups,
    claim: Mapping[str, Any],
    preferred: str | None = None,
) -> Outcome:
    """Bring one claim to Ready with its IPAddress (`preferred` if still free); raise to retry."""
    meta = claim["metadata"]
    key = pool_key(claim)
    if key is None:
        return Outcome()
    if await is_paused(kube, claim):
        return Outcome(status=status_with(claim, pausing.condition(True)))
    pool = ready_pool(lookups, key)
    existing = lookups.address_of_claim(meta["namespace"], meta["name"])
    if existing is not None and not existing[1]:
        address: str | None = existing[0]
    elif key.kind == IN_CLUSTER:
        address = await allocate_in_cluster(kube, allocator, lookups, claim, pool, preferred)
    else:
        address = await allocate_in_netbox(kube, netbox_clients, claim, pool)
    if address is None:
        raise errors.Waiting(f"{key.describe()} has no free address", reason=POOL_EXHAUSTED)
    return Outcome(
        status=status_with(
            claim,
            pausing.condition(False),
            Update.true(conditions.READY, "Allocated", address),
            address_ref=meta["name"],
        ),
    )


def failure_status(claim: Mapping[str, Any], error: errors.CapfleetError) -> dict[str, Any]:
    """The claim's status after a failed reconcile: Ready False with a contract reason."""
    reason = error.reason if error.reason in {POOL_NOT_READY, POOL_EXHAUSTED} else ALLOCATION_FAILED
    return status_with(claim, pausing.condition(False), Update.false(conditions.READY, reason, error.message))


async def release(
    kube: Kube, netbox_clients: netbox_pools.Clients, lookups: Lookups, claim: Mapping[str, Any]
) -> None:
    """Release the claim's address in NetBox (unless moving), then let its IPAddress go."""
    key = pool_key(claim)
    pool = lookups.pool(key) if key is not None else None
    if pool is not None and key is not None and key.kind != IN_CLUSTER and not for_move(claim["metadata"]):
        await netbox_pools.release(await netbox_clients.for_pool(kube, pool), claim, pool)
    meta = claim["metadata"]
    address = await kube.get(resources.IP_ADDRESSES, meta["name"], meta["namespace"])
    if address is None or not ownership.is_owned_by(address, claim):
        return
    finalizers = [f for f in address["metadata"].get("finalizers") or [] if f != PROTECT_FINALIZER]
    await kube.patch(
        resources.IP_ADDRESSES,
        meta["name"],
        {
            "metadata": {
                "finalizers": finalizers or None,
                "resourceVersion": address["metadata"]["resourceVersion"],
            }
        },
        meta["namespace"],
    )
    await kube.delete(resources.IP_ADDRESSES, meta["name"], meta["namespace"], uid=address["metadata"]["uid"])


def for_move(meta: Mapping[str, Any]) -> bool:
    return DELETE_FOR_MOVE in (meta.get("annotations") or {})
