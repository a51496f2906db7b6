"""What ipam-address's controllers do, between the engine and the claim logic.

A claim on an exhausted pool (or one not ready) says so on Ready and is registered as waiting for its
pool: a release in that pool, or a change to the pool, reconciles the waiting claims at once (the
claims' controller asks the allocator which wait), and the error's backoff retries them meanwhile.
An IPAddress of our pools is reconciled on its own: its pending choice settles once the index shows
it, and CAPI's finalizer comes off one deleted by hand or orphaned (its claim, live, gets the same
address back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions, errors, events, pausing, resources
from capfleet.conditions import Update
from ipam_address import claims, pools
from ipam_address.claims import Claim
from ipam_address.contexts import Context
from ipam_address.pools import IN_CLUSTER

CLAIMS = resources.IP_ADDRESS_CLAIMS
DEPRECATED_POOL_KIND = "DeprecatedPoolKind"
WAITS_FOR_THE_POOL = frozenset({claims.POOL_EXHAUSTED, claims.POOL_NOT_READY})


def bound_to(address_ref: str) -> dict[str, Any]:
    """The status field of a claim bound to its IPAddress (named like the claim)."""
    return {"addressRef": {"name": address_ref}}


def allocated(address: str) -> list[Update]:
    return [pausing.condition(False), Update.true(conditions.READY, "Allocated", address)]


async def write_status(
    ctx: Context, body: Mapping[str, Any], updates: list[Update], fields: Mapping[str, Any] | None = None
) -> Mapping[str, Any]:
    """Write a claim's status through the kit, at once; return the claim as it now stands, so a later
    write in the same reconcile sends only what differs and carries the current resourceVersion."""
    return await ctx.write_status(CLAIMS, body, fields or {}, updates, None)


async def write_failure(
    ctx: Context, body: Mapping[str, Any], error: errors.CapfleetError
) -> Mapping[str, Any]:
    """Ready False with one of the contract's reasons, and a Warning Event with the error's own reason
    (once per transition): only failures are announced, a bound claim is the normal case, not news."""
    ready = Update.false(conditions.READY, claims.failure_reason(error), error.message)
    written = await write_status(ctx, body, [pausing.condition(False), ready])
    await ctx.recorder.transition(body, "Warning", error.reason, error.message)
    return written


async def warn_deprecated_kind(ctx: Context, claim: Claim) -> None:
    """A Warning, once per claim while this process runs, on a claim whose poolRef names kind IPPool:
    it is served from the HybridIPPool of the same name until v1alpha2 drops the alias."""
    if not ctx.notices.first(str(claim.meta.get("uid") or claim.name)):
        return
    message = (
        f"poolRef kind {pools.DEPRECATED_IN_CLUSTER} is deprecated and served from {claim.pool.describe()}"
        f" until v1alpha2, which drops the alias: recreate this claim with poolRef kind {pools.IN_CLUSTER}"
    )
    await events.post(ctx.kube, claim.body, "Warning", DEPRECATED_POOL_KIND, message)


async def serve_claim(ctx: Context, claim: Claim) -> None:
    """Reconcile a claim and write its status; a claim that waits for its pool is registered as waiting."""
    body = claim.body
    if claim.names_deprecated_kind:
        await warn_deprecated_kind(ctx, claim)
    try:
        address = await claims.reconcile(ctx, claim)
    except errors.CapfleetError as exc:
        if exc.reason in WAITS_FOR_THE_POOL:
            ctx.allocator.waits(claim.pool, claim.name)
        await write_failure(ctx, body, exc)
        raise
    if address is None:
        await write_status(ctx, body, [pausing.condition(True)])
        return
    body = await write_status(ctx, body, allocated(address), bound_to(claim.name))
    if claim.pool.kind == IN_CLUSTER:
        await claims.hold_for_release(ctx.kube, body, ctx.finalizer)


async def release_claim(ctx: Context, claim: Claim) -> None:
    """Release a deleted claim's address, unless its Cluster is paused (a move releases nothing)."""
    if not pausing.moving(claim.meta) and await claims.is_paused(ctx.kube, claim):
        raise errors.Waiting("the claim's Cluster is paused; the address is released once it is unpaused")
    await claims.release(ctx, claim)
    ctx.allocator.forget(claim.pool, claim.name)


async def reconcile_address(ctx: Context, address: Mapping[str, Any]) -> None:
    """An IPAddress of one of our pools as it stands: its pending choice settles once the index shows it,
    and CAPI's finalizer comes off one being deleted whose claim is not (deleted by hand, or orphaned)."""
    holding = pools.holding_of(address)
    if holding is None:
        return
    meta = address["metadata"]
    if ctx.lookups.owner(holding.pool)(holding.address) == holding.claim:
        ctx.allocator.settle(holding.pool, holding.address)
    if holding.deleting and claims.PROTECT_FINALIZER in (meta.get("finalizers") or []):
        await let_deleted_address_go(ctx, meta, holding.claim)


async def let_deleted_address_go(ctx: Context, meta: Mapping[str, Any], claim_name: str) -> None:
    """An IPAddress deleted by hand, or orphaned: drop CAPI's finalizer; a live claim gets it back (same
    address) once it is gone. A claim being deleted removes the finalizer in its own release."""
    claim = await ctx.kube.get(CLAIMS, claim_name, meta["namespace"])
    if claim is not None and claim["metadata"].get("deletionTimestamp"):
        return
    remaining = [f for f in meta.get("finalizers") or [] if f != claims.PROTECT_FINALIZER]
    patch = {"metadata": {"finalizers": remaining or None}}
    await ctx.kube.patch(resources.IP_ADDRESSES, meta["name"], patch, meta["namespace"])
