"""ipam-address's controllers and kopf's indexes: declarations only, logic lives elsewhere.

kopf fills every index from a fresh list before it delivers any event, so the engine, which is fed by
events, reconciles nothing before the allocator sees every IPAddress that exists: that is what makes a
restart in the middle of a burst safe. Four controllers: IPAddressClaims of capfleet's pools (allocate,
release), their IPAddresses (settle, let a hand-deleted one go), and each kind of pool (status, deletion).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from capfleet import errors, reconciling, resources, runtime
from capfleet.api import kinds
from capfleet.controller import watching
from capfleet.controller.caches import Reads
from capfleet.controller.engine import DONE, Controller, Key, Result, Watch, done_after
from ipam_address import claims, contexts, pool_status, pools, serving
from ipam_address.allocator import Allocator, Owner
from ipam_address.claims import Claim
from ipam_address.contexts import Context
from ipam_address.pools import IN_CLUSTER, PoolInfo, PoolKey

IDENTITY = runtime.Identity("ipam-address", on_engine=True)
ADDRESSES = resources.IP_ADDRESSES.watch
HYBRID_IPPOOLS = kinds.HYBRID_IPPOOL.resource.watch
NETBOX_POOLS = kinds.NETBOX_IPPOOL.resource.watch

AddressIndex = kopf.Index[Any, Any]


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
    pool_addresses = index(kwargs, "pool_addresses")

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

    def addresses(key: PoolKey) -> list[str]:
        return list(pool_addresses.get(key, ()))

    return contexts.Lookups(pool=pool, owner=owner, address_of_claim=address_of_claim, addresses=addresses)


@kopf.on.startup()
def create_allocator(memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf hands startup the indexes too (empty until its watches list): kept in memo as the Lookups.
    contexts.start(memo, lookups(kwargs))


def context(memo: kopf.Memo, reads: Reads) -> Context:
    return Context.from_memo(memo, reads=reads, finalizer=IDENTITY.finalizer)


def claim_of(obj: Mapping[str, Any]) -> Claim:
    claim = Claim.of(obj)
    if claim is None:  # the controller `serves` only claims of our pools
        raise errors.InvalidSpec("not a claim of a capfleet pool")
    return claim


def claim_needs_finalizer(obj: Mapping[str, Any]) -> bool:
    claim = Claim.of(obj)
    return claim is not None and claims.needs_finalizer(claim, IDENTITY.finalizer)


def pool_of_address(obj: Mapping[str, Any]) -> list[Key]:
    holding = pools.holding_of(obj)
    return (
        []
        if holding is None or holding.pool.kind != IN_CLUSTER
        else [Key(holding.pool.namespace, holding.pool.name)]
    )


async def serve_claim(ctx: Context, obj: Mapping[str, Any]) -> Result:
    await serving.serve_claim(ctx, claim_of(obj))
    return DONE


async def release_claim(ctx: Context, obj: Mapping[str, Any]) -> Result:
    await serving.release_claim(ctx, claim_of(obj))
    return DONE


def tune(memo: kopf.Memo, controller: Controller[Context]) -> Controller[Context]:
    """The claims' controller learns from the allocator which claims wait for a pool."""
    if controller is not CLAIM_CONTROLLER:
        return controller

    def waiting_on(key: PoolKey) -> list[str]:
        # Asked at each event: the operator's startup steps have all run by then.
        return reconciling.from_memo(memo, contexts.ALLOCATOR_KEY, Allocator).wake(key)

    def concerned(address: Mapping[str, Any]) -> list[Key]:
        holding = pools.holding_of(address)
        if holding is None:
            return []
        names = [holding.claim, *waiting_on(holding.pool)]
        return [Key(holding.pool.namespace, name) for name in dict.fromkeys(names)]

    def waiting(pool: Mapping[str, Any]) -> list[Key]:
        key = pools.info_of(pool).key
        return [Key(key.namespace, name) for name in waiting_on(key)]

    watches = [
        Watch(resources.IP_ADDRESSES, keys=concerned),
        Watch(kinds.HYBRID_IPPOOL.resource, keys=waiting),
        Watch(kinds.NETBOX_IPPOOL.resource, keys=waiting, echoes=True),
    ]
    return dataclasses.replace(controller, watches=watches)


CLAIM_CONTROLLER: Controller[Context] = Controller(
    resources.IP_ADDRESS_CLAIMS,
    IDENTITY.finalizer,
    serve_claim,
    release_claim,
    serves=lambda obj: Claim.of(obj) is not None,
    needs_finalizer=claim_needs_finalizer,
)
ADDRESS_CONTROLLER: Controller[Context] = Controller(
    resources.IP_ADDRESSES,
    IDENTITY.finalizer,
    done_after(serving.reconcile_address),
    done_after(serving.reconcile_address),
    serves=lambda obj: pools.holding_of(obj) is not None,
    needs_finalizer=lambda obj: False,
    helps_deletion=True,
)
HYBRID_POOL_CONTROLLER: Controller[Context] = Controller(
    kinds.HYBRID_IPPOOL.resource,
    IDENTITY.finalizer,
    done_after(pool_status.reconcile),
    done_after(pool_status.finalize),
    watches=[Watch(resources.IP_ADDRESSES, keys=pool_of_address, settle_seconds=pool_status.SETTLE_SECONDS)],
)
NETBOX_POOL_CONTROLLER: Controller[Context] = Controller(
    kinds.NETBOX_IPPOOL.resource,
    IDENTITY.finalizer,
    done_after(pool_status.check_netbox),
    done_after(pool_status.finalize),
)

start_engines = watching.register(
    [CLAIM_CONTROLLER, ADDRESS_CONTROLLER, HYBRID_POOL_CONTROLLER, NETBOX_POOL_CONTROLLER], context, tune=tune
)
