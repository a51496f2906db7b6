"""kopf handlers of ipam-address: decorators, typed arguments and kopf's indexes; logic lives elsewhere.

kopf fills every index from a fresh list before it runs any handler, so after a restart the allocator
sees every IPAddress that exists before it serves a single claim: that is what makes a restart in the
middle of a burst safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from capfleet import errors, reconciling, resources, runtime, statuses
from capfleet.api import kinds
from ipam_address import claims, contexts, netbox_pools, pool_status, pools, serving
from ipam_address.allocator import Allocator, Owner
from ipam_address.claims import Claim
from ipam_address.contexts import Context
from ipam_address.pools import PoolInfo, PoolKey

IDENTITY = runtime.Identity("ipam-address")
CLAIMS = resources.IP_ADDRESS_CLAIMS.watch
ADDRESSES = resources.IP_ADDRESSES.watch
HYBRID_IPPOOLS = kinds.HYBRID_IPPOOL.resource.watch
NETBOX_POOLS = kinds.NETBOX_IPPOOL.resource.watch

AddressIndex = kopf.Index[Any, Any]


def our_claim(body: kopf.Body, **_: Any) -> bool:
    return Claim.of(body) is not None


def our_claim_to_release(body: kopf.Body, **_: Any) -> bool:
    """Claims whose deletion waits for `release_claim`: kopf keeps its finalizer on exactly these."""
    claim = Claim.of(body)  # parsed once: kopf asks this of every claim event
    return claim is not None and claims.needs_finalizer(claim, IDENTITY.finalizer)


def handled_claim(body: Mapping[str, Any]) -> bool | None:
    """Whether a claim of ours shows it was served (`claims.handled`); None for any other object."""
    if body.get("kind") != resources.IP_ADDRESS_CLAIMS.kind or Claim.of(body) is None:
        return None
    return claims.handled(body)


def our_address(body: kopf.Body, **_: Any) -> bool:
    return pools.holding_of(body) is not None


# Indexes: pools by key, and IPAddresses of our pools by (pool, address), by pool and by claim.


@kopf.index(*HYBRID_IPPOOLS)
@kopf.index(*NETBOX_POOLS)
async def capfleet_pools(body: kopf.Body, **_: Any) -> dict[PoolKey, PoolInfo]:
    info = pools.info_of(body)
    return {info.key: info}


@kopf.index(*ADDRESSES)
async def address_holders(body: kopf.Body, **_: Any) -> dict[tuple[PoolKey, str], str]:
    holding = pools.holding_of(body)
    return {} if holding is None else {(holding.pool, holding.address): holding.claim}


@kopf.index(*ADDRESSES)
async def pool_addresses(body: kopf.Body, **_: Any) -> dict[PoolKey, str]:
    holding = pools.holding_of(body)
    return {} if holding is None else {holding.pool: holding.address}


@kopf.index(*ADDRESSES)
async def claim_addresses(body: kopf.Body, **_: Any) -> dict[tuple[str, str], tuple[str, bool]]:
    holding = pools.holding_of(body)
    if holding is None:
        return {}
    return {(holding.pool.namespace, holding.claim): (holding.address, holding.deleting)}


def index(kwargs: dict[str, Any], name: str) -> AddressIndex:
    """One of this module's indexes, which kopf passes to every handler as a keyword argument."""
    found: AddressIndex = kwargs[name]
    return found


def lookups(kwargs: dict[str, Any]) -> contexts.Lookups:
    capfleet_pools = index(kwargs, "capfleet_pools")
    address_holders = index(kwargs, "address_holders")
    claim_addresses = index(kwargs, "claim_addresses")

    def pool(key: PoolKey) -> PoolInfo | None:
        found: PoolInfo | None = next(iter(capfleet_pools.get(key, ())), None)
        return found

    def owner(key: PoolKey) -> Owner:
        def holder(address: str) -> str | None:
            found: str | None = next(iter(address_holders.get((key, address), ())), None)
            return found

        return holder

    def address_of_claim(namespace: str, name: str) -> tuple[str, bool] | None:
        found: tuple[str, bool] | None = next(iter(claim_addresses.get((namespace, name), ())), None)
        return found

    return contexts.Lookups(pool=pool, owner=owner, address_of_claim=address_of_claim)


@kopf.on.startup()
def create_allocator(memo: kopf.Memo, **_: Any) -> None:
    contexts.start(memo)


def context(memo: kopf.Memo, kwargs: dict[str, Any]) -> Context:
    return Context.from_memo(memo, lookups=lookups(kwargs), finalizer=IDENTITY.finalizer)


def claim_of(body: kopf.Body) -> Claim:
    claim = Claim.of(body)
    if claim is None:  # the handlers' `when=our_claim` filter lets only claims of our pools through
        raise kopf.PermanentError("not a claim of a capfleet pool")
    return claim


# Claims.


@kopf.on.resume(*CLAIMS, when=our_claim)
@kopf.on.create(*CLAIMS, when=our_claim)
@kopf.on.update(*CLAIMS, when=our_claim)
@runtime.reconciler("IPAddressClaim")
async def serve_claim(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await serving.serve_claim(context(memo, kwargs), claim_of(body))


@kopf.on.delete(*CLAIMS, when=our_claim_to_release)
@runtime.reconciler("IPAddressClaim")
async def release_claim(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await serving.release_claim(context(memo, kwargs), claim_of(body))


# IPAddresses of our pools.


@kopf.on.event(*ADDRESSES, when=our_address)
async def observe_address(type: str, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    await serving.observe_address(context(memo, kwargs), type, body)


# In-cluster pools.


@kopf.on.resume(*HYBRID_IPPOOLS)
@kopf.on.create(*HYBRID_IPPOOLS)
@kopf.on.update(*HYBRID_IPPOOLS)
async def pool_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    allocator = reconciling.from_memo(memo, contexts.ALLOCATOR_KEY, Allocator)
    allocator.released(pools.info_of(body).key)  # the pool may have grown: wake waiting claims


@kopf.daemon(*HYBRID_IPPOOLS, cancellation_timeout=1.0)
async def keep_pool_status(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **kwargs: Any
) -> None:
    key = pools.info_of(body).key
    pool_addresses = index(kwargs, "pool_addresses")
    kube, _ = Context.parts(memo)
    await pool_status.keep(
        kube,
        reconciling.from_memo(memo, contexts.ALLOCATOR_KEY, Allocator),
        body,
        lambda: list(pool_addresses.get(key, ())),
        lambda: bool(stopped),
    )


# NetBox pools.


@kopf.on.resume(*NETBOX_POOLS)
@kopf.on.create(*NETBOX_POOLS)
@kopf.on.update(*NETBOX_POOLS)
@runtime.reconciler("NetboxIPPool")
async def check_netbox_pool(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
    ctx = context(memo, kwargs)
    await netbox_pools.check_into(ctx.kube, ctx.netbox_clients, body, patch.status)
    ctx.allocator.released(pools.info_of(body).key)


@kopf.on.delete(*HYBRID_IPPOOLS)
@kopf.on.delete(*NETBOX_POOLS)
@runtime.reconciler("HybridIPPool")
async def guard_pool_deletion(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
    in_use = len(list(index(kwargs, "pool_addresses").get(pools.info_of(body).key, ())))
    if in_use:
        message = (
            f"{in_use} addresses are still allocated from this pool; it is deleted when they are released"
        )
        statuses.merge_into(patch.status, body.get("status") or {}, pool_status.in_use_status(body, message))
        raise errors.Waiting(message, reason="PoolInUse")
    await netbox_pools.let_go(Context.parts(memo)[0], body)
