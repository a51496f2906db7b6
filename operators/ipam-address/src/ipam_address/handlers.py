"""kopf handlers of ipam-address: decorators, typed arguments and kopf's indexes; logic lives elsewhere.

kopf fills every index from a fresh list before it runs any handler, so after a restart the allocator
sees every IPAddress that exists before it serves a single claim: that is what makes a restart in the
middle of a burst safe.
"""

from __future__ import annotations

from typing import Any

import kopf

from capfleet import errors, runtime, statuses
from capfleet.api import kinds
from ipam_address import claims, netbox_pools, pool_status, pools, serving, spaces
from ipam_address.allocator import Allocator, Owner
from ipam_address.pools import PoolInfo, PoolKey

IDENTITY = runtime.Identity("ipam-address")
CLAIMS = ("ipam.cluster.x-k8s.io", "v1beta2", "ipaddressclaims")
ADDRESSES = ("ipam.cluster.x-k8s.io", "v1beta2", "ipaddresses")
IPPOOLS = (kinds.IPAM_GROUP, kinds.VERSION, "ippools")
NETBOX_POOLS = (kinds.IPAM_GROUP, kinds.VERSION, "netboxippools")

AddressIndex = kopf.Index[Any, Any]


def ours(spec: kopf.Spec, namespace: str | None, **_: Any) -> bool:
    return pools.key_of_ref(namespace or "", spec.get("poolRef")) is not None


# Indexes: pools by key, and IPAddresses of our pools by (pool, address), by pool and by claim.


@kopf.index(*IPPOOLS)
@kopf.index(*NETBOX_POOLS)
def capfleet_pools(body: kopf.Body, **_: Any) -> dict[PoolKey, PoolInfo]:
    info = pools.info_of(body)
    return {info.key: info}


@kopf.index(*ADDRESSES)
def address_holders(
    spec: kopf.Spec, name: str, namespace: str | None, **_: Any
) -> dict[tuple[PoolKey, str], str]:
    key = pools.key_of_ref(namespace or "", spec.get("poolRef"))
    if key is None or not spec.get("address"):
        return {}
    return {(key, spaces.canonical(spec["address"])): (spec.get("claimRef") or {}).get("name") or name}


@kopf.index(*ADDRESSES)
def pool_addresses(spec: kopf.Spec, namespace: str | None, **_: Any) -> dict[PoolKey, str]:
    key = pools.key_of_ref(namespace or "", spec.get("poolRef"))
    return {key: spaces.canonical(spec["address"])} if key is not None and spec.get("address") else {}


@kopf.index(*ADDRESSES)
def claim_addresses(
    spec: kopf.Spec, meta: kopf.Meta, name: str, namespace: str | None, **_: Any
) -> dict[tuple[str, str], tuple[str, bool]]:
    if (
        namespace is None
        or pools.key_of_ref(namespace, spec.get("poolRef")) is None
        or not spec.get("address")
    ):
        return {}
    claim = (spec.get("claimRef") or {}).get("name") or name
    return {(namespace, claim): (spaces.canonical(spec["address"]), bool(meta.get("deletionTimestamp")))}


def index(kwargs: dict[str, Any], name: str) -> AddressIndex:
    """One of this module's indexes, which kopf passes to every handler as a keyword argument."""
    found: AddressIndex = kwargs[name]
    return found


def lookups(kwargs: dict[str, Any]) -> claims.Lookups:
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

    return claims.Lookups(pool=pool, owner=owner, address_of_claim=address_of_claim)


@kopf.on.startup()
def create_allocator(memo: kopf.Memo, **_: Any) -> None:
    # At startup, in the operator-wide memo: kopf gives each object a shallow copy of it, so an
    # allocator created inside a handler would be private to one claim.
    memo["allocator"] = Allocator()
    memo["netbox_clients"] = netbox_pools.Clients()


def context(memo: kopf.Memo, kwargs: dict[str, Any]) -> serving.Context:
    clients = memo.get("netbox_clients")
    if not isinstance(clients, netbox_pools.Clients):
        raise RuntimeError("ipam-address did not start: no NetBox clients in memo")
    return serving.Context(
        runtime.kube(memo), runtime.recorder(memo), allocator(memo), clients, lookups(kwargs)
    )


def allocator(memo: kopf.Memo) -> Allocator:
    found = memo.get("allocator")
    if not isinstance(found, Allocator):
        raise RuntimeError("ipam-address did not start: no allocator in memo")
    return found


# Claims.


@kopf.on.resume(*CLAIMS, when=ours)
@kopf.on.create(*CLAIMS, when=ours)
@kopf.on.update(*CLAIMS, when=ours)
@runtime.reconciler("IPAddressClaim")
async def serve_claim(
    body: kopf.Body,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    await serving.serve_claim(context(memo, kwargs), body)


@kopf.on.event(*CLAIMS, when=ours)
async def repair_claim_status(
    type: str, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any
) -> None:
    if type in {"ADDED", "MODIFIED"}:
        serving.repair_status(context(memo, kwargs), body, patch.status)


@kopf.on.delete(*CLAIMS, when=ours)
@runtime.reconciler("IPAddressClaim")
async def release_claim(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    ctx = context(memo, kwargs)
    if not claims.for_move(body["metadata"]) and await claims.is_paused(ctx.kube, body):
        raise errors.Waiting("the claim's Cluster is paused; the address is released once it is unpaused")
    await claims.release(ctx.kube, ctx.netbox_clients, ctx.lookups, body)
    key = claims.pool_key(body)
    if key is not None:
        ctx.allocator.released(key)


# IPAddresses of our pools.


@kopf.on.event(*ADDRESSES, when=ours)
async def observe_address(
    type: str,
    body: kopf.Body,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    await serving.observe_address(context(memo, kwargs), type, body)


# In-cluster pools.


@kopf.on.resume(*IPPOOLS)
@kopf.on.create(*IPPOOLS)
@kopf.on.update(*IPPOOLS)
async def pool_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    allocator(memo).released(pools.info_of(body).key)  # the pool may have grown: wake waiting claims


@kopf.daemon(*IPPOOLS, cancellation_timeout=1.0)
async def keep_pool_status(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **kwargs: Any
) -> None:
    key = pools.info_of(body).key
    pool_addresses = index(kwargs, "pool_addresses")
    await pool_status.keep(
        runtime.kube(memo),
        allocator(memo),
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


@kopf.on.delete(*IPPOOLS)
@kopf.on.delete(*NETBOX_POOLS)
@runtime.reconciler("IPPool")
async def guard_pool_deletion(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    in_use = len(list(index(kwargs, "pool_addresses").get(pools.info_of(body).key, ())))
    if in_use:
        message = (
            f"{in_use} addresses are still allocated from this pool; it is deleted when they are released"
        )
        statuses.merge_into(patch.status, body.get("status") or {}, pool_status.in_use_status(body, message))
        raise errors.Waiting(message, reason="PoolInUse")
