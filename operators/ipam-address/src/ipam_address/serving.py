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

from capfleet import errors, events, resources, statuses
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


async def serve_claim(
    ctx: Context,
    claim: Mapping[str, Any],
    annotations: MutableMapping[str, Any],
    status: MutableMapping[str, Any],
) -> None:
    """Reconcile a claim into kopf's patch; on exhaustion or a pool not ready, wait here for a change."""
    kube = ctx.kube
    deadline = time.monotonic() + WAIT_IN_HANDLER_SECONDS
    current_status = dict(claim.get("status") or {})
    while True:
        try:
            outcome = await claims.reconcile(kube, ctx.allocator, ctx.netbox_clients, ctx.lookups, claim)
        except errors.CapfleetError as exc:
            failed = claims.failure_status(claim, exc)
            key = claims.pool_key(claim)
            remaining = deadline - time.monotonic()
            if (
                exc.reason in {claims.POOL_EXHAUSTED, claims.POOL_NOT_READY}
                and key is not None
                and remaining > 0
            ):
                await write_status(kube, claim, current_status, failed)
                await ctx.recorder.transition(claim, "Warning", exc.reason, exc.message)
                current_status.update(failed)
                if await ctx.allocator.wait_for_release(key, remaining):
                    continue
            await ctx.recorder.transition(claim, "Warning", exc.reason, exc.message)
            statuses.merge_into(status, claim.get("status") or {}, failed)
            raise
        if outcome.annotations != {
            k: (claim["metadata"].get("annotations") or {}).get(k) for k in outcome.annotations
        }:
            annotations.update(outcome.annotations)
        statuses.merge_into(status, claim.get("status") or {}, outcome.status)
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


async def repair_claim(ctx: Context, namespace: str, name: str) -> None:
    """Re-serve a live claim outside its own handler (its IPAddress vanished, or its status was lost)."""
    kube = ctx.kube
    claim = await kube.get(resources.IP_ADDRESS_CLAIMS, name, namespace)
    if claim is None or claim["metadata"].get("deletionTimestamp") or claims.pool_key(claim) is None:
        return
    annotations: dict[str, Any] = {}
    status: dict[str, Any] = {}
    try:
        await serve_claim(ctx, claim, annotations, status)
    finally:
        if annotations:
            await kube.patch(
                resources.IP_ADDRESS_CLAIMS, name, {"metadata": {"annotations": annotations}}, namespace
            )
        if status:
            await kube.patch_status(resources.IP_ADDRESS_CLAIMS, name, status, namespace)


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
        await repair_claim(ctx, meta["namespace"], claim_name)
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


def claim_needs_repair(claim: Mapping[str, Any]) -> bool:
    """A claim that was served once (it carries our annotation) but whose status lost its addressRef."""
    annotations = claim["metadata"].get("annotations") or {}
    address_ref = (claim.get("status") or {}).get("addressRef") or {}
    return (
        claims.ADDRESS_ANNOTATION in annotations
        and not address_ref.get("name")
        and not claim["metadata"].get("deletionTimestamp")
    )
