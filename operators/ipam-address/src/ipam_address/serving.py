"""What the claim and IPAddress handlers do, between kopf's triggers and the claim logic.

A claim on an exhausted pool waits *inside* its handler for a release signal, so it is allocated as soon
as an address frees up rather than at its next retry; its PoolExhausted condition is written before it
starts waiting. IPAddress events settle pending choices, wake waiting claims, and repair claims whose
IPAddress was deleted by hand.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from capfleet import conditions, errors, events, pausing, resources, statuses
from capfleet.conditions import Update
from capfleet.kube import Kube
from ipam_address import claims, netbox_pools, spaces
from ipam_address.allocator import Allocator
from ipam_address.pools import key_of_ref

WAIT_IN_HANDLER_SECONDS = 20.0
"""How long a claim waits inside its handler for its pool to free an address or become ready."""


@dataclass(frozen=True)
class Context:
    """What every claim operation needs: the API, the allocation state, NetBox clients, kopf's indexes."""

    kube: Kube
    recorder: events.Recorder
    allocator: Allocator
    netbox_clients: netbox_pools.Clients
    lookups: claims.Lookups


async def serve_claim(ctx: Context, claim: Mapping[str, Any], preferred: str | None = None) -> None:
    """Reconcile a claim and write its status; on exhaustion or a pool not ready, wait here for a change.

    The status is written here, right after the IPAddress, not left to kopf's patch at the end of the
    handler: then no watch event ever shows a claim whose IPAddress exists without its status, which
    `repair_status` would otherwise take for a lost status.
    """
    kube = ctx.kube
    deadline = time.monotonic() + WAIT_IN_HANDLER_SECONDS
    current_status = dict(claim.get("status") or {})
    while True:
        try:
            outcome = await claims.reconcile(
                kube, ctx.allocator, ctx.netbox_clients, ctx.lookups, claim, preferred
            )
        except errors.CapfleetError as exc:
            failed = claims.failure_status(claim, exc)
            await write_status(kube, claim, current_status, failed)
            current_status.update(failed)
            await ctx.recorder.transition(claim, "Warning", exc.reason, exc.message)
            key = claims.pool_key(claim)
            remaining = deadline - time.monotonic()
            waits = exc.reason in {claims.POOL_EXHAUSTED, claims.POOL_NOT_READY}
            if (
                waits
                and key is not None
                and remaining > 0
                and await ctx.allocator.wait_for_release(key, remaining)
            ):
                continue
            raise
        await write_status(kube, claim, current_status, outcome.status)
        return


async def write_status(
    kube: Kube,
    claim: Mapping[str, Any],
    current: Mapping[str, Any],
    desired: Mapping[str, Any],
) -> None:
    """Write a claim's status now (not at the end of the handler), if it differs."""
    changed = statuses.differences(current, desired)
    if not changed:
        return
    meta = claim["metadata"]
    await kube.patch_status(resources.IP_ADDRESS_CLAIMS, meta["name"], changed, meta["namespace"])


async def repair_claim(ctx: Context, namespace: str, name: str, preferred: str | None = None) -> None:
    """Re-serve a live claim outside its own handler: its IPAddress vanished (it held `preferred`)."""
    kube = ctx.kube
    claim = await kube.get(resources.IP_ADDRESS_CLAIMS, name, namespace)
    if claim is None or claim["metadata"].get("deletionTimestamp") or claims.pool_key(claim) is None:
        return
    await serve_claim(ctx, claim, preferred)


async def observe_address(
    ctx: Context,
    event_type: str | None,
    address: Mapping[str, Any],
) -> None:
    """React to an IPAddress of one of our pools appearing, changing, or going away."""
    kube, allocator = ctx.kube, ctx.allocator
    meta, spec = address["metadata"], address.get("spec") or {}
    key = key_of_ref(meta["namespace"], spec.get("poolRef"))
    if key is None:
        return
    text = spaces.canonical(str(spec.get("address", "")))
    claim_name = (spec.get("claimRef") or {}).get("name") or meta["name"]
    if event_type == "DELETED":
        allocator.released(key)
        await repair_claim(ctx, meta["namespace"], claim_name, preferred=text)
        return
    if ctx.lookups.owner(key)(text) == claim_name:
        allocator.settle(key, text)
    if meta.get("deletionTimestamp") and claims.PROTECT_FINALIZER in (meta.get("finalizers") or []):
        claim = await kube.get(resources.IP_ADDRESS_CLAIMS, claim_name, meta["namespace"])
        if claim is not None and claim["metadata"].get("deletionTimestamp"):
            return  # the claim's own release removes the finalizer
        # Deleted by hand, or orphaned: let it go; a live claim gets it back (same address) on DELETED.
        remaining = [f for f in meta.get("finalizers") or [] if f != claims.PROTECT_FINALIZER]
        await kube.patch(
            resources.IP_ADDRESSES,
            meta["name"],
            {"metadata": {"finalizers": remaining or None}},
            meta["namespace"],
        )


def repair_status(ctx: Context, claim: Mapping[str, Any], status_patch: MutableMapping[str, Any]) -> None:
    """Rebuild a lost status from the claim's IPAddress, which kopf's index already holds.

    Never allocates: a claim without an IPAddress is its serving handler's business, and repairing it
    here would race with that handler.
    """
    meta = claim["metadata"]
    status = claim.get("status") or {}
    if meta.get("deletionTimestamp") or (status.get("addressRef") or {}).get("name"):
        return
    if any(c.get("type") == "Paused" and c.get("status") == "True" for c in status.get("conditions") or []):
        return
    existing = ctx.lookups.address_of_claim(meta["namespace"], meta["name"])
    if existing is None or existing[1]:
        return
    allocated = Update.true(conditions.READY, "Allocated", existing[0])
    desired = claims.status_with(claim, pausing.condition(False), allocated, address_ref=meta["name"])
    statuses.merge_into(status_patch, status, desired)
