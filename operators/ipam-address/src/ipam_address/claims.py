"""Serving one IPAddressClaim: find its pool, choose or recover its address, write the IPAddress.

Level-triggered and idempotent: every trigger (a new claim, a restart, a lost status, an IPAddress
deleted by hand) runs the same `reconcile`, which derives everything from the claim, the pool and the
IPAddress objects. A claim whose IPAddress was deleted by hand is served again with the address it held
while still free (the allocator remembers it), so it gets the same address back; a wiped status is
rebuilt from the IPAddress that still exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import errors, ownership, pausing, resources, versions
from capfleet.api import capi
from capfleet.kube import Kube, KubeError
from ipam_address import netbox_pools, spaces
from ipam_address.contexts import Context
from ipam_address.pools import (
    GROUP,
    IN_CLUSTER,
    PoolInfo,
    PoolKey,
    key_of_ref,
    names_deprecated_kind,
    space_of,
)

PROTECT_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
# Set on a claim before its first NetBox write: a claim without it (and without an address) never made
# anything in NetBox, so its deletion need not reach NetBox (whose token may be wrong, or which may be gone).
# Its value is the instance name the claim's NetBox IP is owned under (`capfleet.instances`); LEGACY_MARK
# for claims whose IP was allocated before instance names were recorded.
NETBOX_MARK = "ipam-address.capfleet.dev/netbox-allocation"
DETACHED = "ipam.capfleet.dev/detached"
"""On an IPAddressClaim being deleted: leave its NetBox IP as NetBox has it (NetBox gone for good), so the
deletion needs no NetBox. Metal3's and capfleet's other kinds' `detached`."""
LEGACY_MARK = "started"

POOL_NOT_READY = "PoolNotReady"
POOL_EXHAUSTED = "PoolExhausted"
ALLOCATION_FAILED = "AllocationFailed"

IP_ADDRESSES = resources.IP_ADDRESSES
CLAIMS = resources.IP_ADDRESS_CLAIMS


@dataclass(frozen=True)
class Claim:
    """An IPAddressClaim of one of our pools: its model to read, its body to reference and to cache in."""

    body: Mapping[str, Any]
    model: capi.IPAddressClaim
    pool: PoolKey

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Claim | None:
        """The claim, when its `poolRef` names one of our pools; None for any other claim."""
        return _claim_of(body)

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Claim | None:
        try:
            model = capi.IPAddressClaim.parse(body)
        except ValueError:  # no poolRef: no pool of ours
            return None
        key = key_of_ref(model.metadata.namespace or "", model.spec.pool_ref)
        return None if key is None else cls(body, model, key)

    @property
    def name(self) -> str:
        return self.model.metadata.name

    @property
    def namespace(self) -> str:
        return self.pool.namespace

    @property
    def meta(self) -> Mapping[str, Any]:
        meta: Mapping[str, Any] = self.body["metadata"]
        return meta

    @property
    def cluster_name(self) -> str | None:
        return self.model.spec.cluster_name or ownership.cluster_name(self.meta)

    @property
    def names_deprecated_kind(self) -> bool:
        """Whether the claim's poolRef names kind IPPool, served as HybridIPPool until v1alpha2."""
        return names_deprecated_kind(self.model.spec.pool_ref)


_claim_of = versions.per_version(Claim.parse)


async def is_paused(kube: Kube, claim: Claim) -> bool:
    """Paused by the claim's own annotation or by its Cluster; a Cluster that is gone pauses nothing."""
    if pausing.hands_off(claim.meta):
        return True
    name = claim.cluster_name
    if not name:
        return False
    found = await kube.get(resources.CAPI_CLUSTERS, name, claim.namespace)
    return pausing.cluster_paused(capi.Cluster.parse(found) if found is not None else None)


def ip_address_body(claim: Claim, pool: PoolInfo, address: str, prefix: int) -> dict[str, Any]:
    """The claim's IPAddress, owned by the claim (controller) and the pool, protected by CAPI's finalizer."""
    meta = ownership.child_metadata(claim.name, claim.body)
    meta["ownerReferences"].append(pool.owner_reference())
    meta["finalizers"] = [PROTECT_FINALIZER]
    spec = capi.IPAddressSpec(
        claim_ref=capi.LocalReference(name=claim.name),
        pool_ref=capi.TypedReference(api_group=GROUP, kind=pool.key.kind, name=pool.key.name),
        address=address,
        prefix=prefix,
        gateway=pool.spec.gateway or None,
    )
    return {
        "apiVersion": IP_ADDRESSES.api_version,
        "kind": IP_ADDRESSES.kind,
        "metadata": meta,
        "spec": spec.to_wire(),
    }


async def create_ip_address(kube: Kube, claim: Claim, body: dict[str, Any]) -> str:
    """Create the claim's IPAddress, or find the one an earlier attempt created; return its address."""
    created, _ = await kube.create_or_get(IP_ADDRESSES, body, claim.namespace)
    return spaces.canonical(capi.IPAddress.parse(created).spec.address)


def ready_pool(ctx: Context, key: PoolKey) -> PoolInfo:
    pool = ctx.lookups.pool(key)
    if pool is None:
        raise errors.DependencyMissing(f"{key.describe()} does not exist", reason=POOL_NOT_READY)
    if pool.deleting:
        raise errors.DependencyMissing(f"{key.describe()} is being deleted", reason=POOL_NOT_READY)
    return pool


async def allocate_in_cluster(ctx: Context, claim: Claim, pool: PoolInfo) -> str | None:
    """Create the claim's IPAddress in an in-cluster pool; None when the pool has no free address."""
    try:
        space = space_of(pool)
    except errors.InvalidSpec as exc:
        raise errors.DependencyMissing(
            f"{pool.key.describe()} is invalid: {exc.message}", reason=POOL_NOT_READY
        ) from exc
    allocator = ctx.allocator
    address = allocator.reserve(pool.key, space, claim.name, ctx.lookups.owner(pool.key))
    if address is None:
        return None
    body = ip_address_body(claim, pool, address, pool.in_cluster().prefix)
    try:
        actual = await create_ip_address(ctx.kube, claim, body)
    except Exception:
        allocator.settle(pool.key, address)
        raise
    if actual != address:  # an IPAddress from an earlier attempt exists: it wins
        allocator.settle(pool.key, address)
    return actual


async def allocate_in_netbox(ctx: Context, claim: Claim, pool: PoolInfo) -> str | None:
    """Create the claim's IPAddress from the NetBox address it owns or is given; None when all are full."""
    if not pool.ready:
        raise errors.DependencyMissing(
            f"{pool.key.describe()} is not ready: {pool.message}", reason=POOL_NOT_READY
        )
    addressing = await ctx.netbox_clients.for_pool(ctx.kube, pool)
    mark = (claim.meta.get("annotations") or {}).get(NETBOX_MARK)
    if mark is None:
        # A claim served before the mark existed may own an IP under the old owner value: it keeps it.
        legacy = await addressing.find_owned(netbox_pools.owner_of(claim.model, pool, None))
        mark = LEGACY_MARK if legacy is not None else await ctx.instance()
        patch = {"metadata": {"annotations": {NETBOX_MARK: mark}}}
        if await ctx.kube.patch(CLAIMS, claim.name, patch, claim.namespace) is None:
            raise errors.Waiting("the claim was deleted")
    instance = netbox_instance(mark)
    allocated = await netbox_pools.allocate(addressing, claim.model, pool, claim.cluster_name, instance)
    if allocated is None:
        return None
    body = ip_address_body(claim, pool, spaces.canonical(allocated.ip), allocated.prefix_length)
    return await create_ip_address(ctx.kube, claim, body)


async def reconcile(ctx: Context, claim: Claim) -> str | None:
    """The claim's address, allocated now or found in its IPAddress; None while the claim is paused.
    Raises to retry (`PoolExhausted` when the pool has no free address)."""
    if await is_paused(ctx.kube, claim):
        return None
    pool = ready_pool(ctx, claim.pool)
    existing = ctx.lookups.address_of_claim(claim.namespace, claim.name)
    if existing is not None and not existing[1]:
        ctx.allocator.holds(claim.pool, claim.name, existing[0])
        return existing[0]
    if claim.pool.kind == IN_CLUSTER:
        address = await allocate_in_cluster(ctx, claim, pool)
    else:
        address = await allocate_in_netbox(ctx, claim, pool)
    if address is None:
        raise errors.Waiting(f"{claim.pool.describe()} has no free address", reason=POOL_EXHAUSTED)
    return address


def needs_finalizer(claim: Claim, finalizer: str) -> bool:
    """Whether deleting a claim waits for its release. A NetBox claim always: its address lives outside
    the cluster, so the engine puts the finalizer on before the first NetBox write. An in-cluster claim once
    `hold_for_release` put it on, just after its status said bound.

    An in-cluster claim deleted before that has nothing to release: its IPAddress is owned by it, so the
    garbage collector deletes it and `serving.reconcile_address` lets CAPI's finalizer go.
    """
    return finalizer in (claim.meta.get("finalizers") or []) or claim.pool.kind != IN_CLUSTER


async def hold_for_release(kube: Kube, body: Mapping[str, Any], finalizer: str) -> None:
    """Put the finalizer on an in-cluster claim about to be bound. The merge patch replaces the whole
    list, so it carries the resourceVersion it was computed from; on a conflict it is computed again
    from a fresh read, once. A claim being deleted can take no new finalizer and needs none."""
    for attempt in range(2):
        meta = body["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if finalizer in finalizers or meta.get("deletionTimestamp"):
            return
        patch = {
            "metadata": {"finalizers": [*finalizers, finalizer], "resourceVersion": meta["resourceVersion"]}
        }
        try:
            await kube.patch(CLAIMS, meta["name"], patch, meta["namespace"])
            return
        except KubeError as exc:
            if exc.status != 409 or attempt:
                raise
        found = await kube.get(CLAIMS, meta["name"], meta["namespace"])
        if found is None:
            return
        body = found


def failure_reason(error: errors.CapfleetError) -> str:
    """The claim's Ready reason after a failed reconcile: one of the contract's reasons."""
    return error.reason if error.reason in {POOL_NOT_READY, POOL_EXHAUSTED} else ALLOCATION_FAILED


async def release(ctx: Context, claim: Claim) -> None:
    """Release the claim's address in NetBox (unless moving, detached, or nothing was ever written there),
    then let its IPAddress go."""
    pool = ctx.lookups.pool(claim.pool)
    detached = DETACHED in (claim.meta.get("annotations") or {})
    in_netbox = claim.pool.kind != IN_CLUSTER and not pausing.moving(claim.meta) and not detached
    address = ctx.lookups.address_of_claim(claim.namespace, claim.name)
    if pool is not None and in_netbox and may_hold_netbox_address(claim, address):
        addressing = await ctx.netbox_clients.for_pool(ctx.kube, pool)
        mark = (claim.meta.get("annotations") or {}).get(NETBOX_MARK)
        await netbox_pools.release(addressing, claim.model, pool, netbox_instance(mark))
    await let_address_go(ctx.kube, claim)


def netbox_instance(mark: str | None) -> str | None:
    """The instance name a claim's NetBox IP is owned under, from its mark (None: the old owner value)."""
    return None if mark in {None, "", LEGACY_MARK} else mark


def may_hold_netbox_address(claim: Claim, address: tuple[str, bool] | None) -> bool:
    """Whether NetBox may hold an address for the claim: a write was started (the mark), or the claim has
    an address (claims served before the mark existed)."""
    marked = NETBOX_MARK in (claim.meta.get("annotations") or {})
    return marked or address is not None or claim.model.status.address_ref is not None


async def let_address_go(kube: Kube, claim: Claim) -> None:
    """Remove CAPI's finalizer from the claim's own IPAddress and delete it."""
    address = await kube.get(IP_ADDRESSES, claim.name, claim.namespace)
    if address is None or not ownership.is_owned_by(address, claim.body):
        return
    meta = address["metadata"]
    finalizers = [f for f in meta.get("finalizers") or [] if f != PROTECT_FINALIZER]
    patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}}
    await kube.patch(IP_ADDRESSES, claim.name, patch, claim.namespace)
    await kube.delete(IP_ADDRESSES, claim.name, claim.namespace, uid=meta["uid"])
