"""A pool's status and deletion: an in-cluster pool's Ready and address counts, written only when they
change, and every pool's deletion held while addresses of it are allocated.

Counting walks the pool's allocated addresses, so the pool's controller settles for a couple of seconds
after the first IPAddress event of a burst (`SETTLE_SECONDS`) and writes once for all of them, never
once per claim; a pool's own status writes wake it no more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from capfleet import conditions, errors, metrics, statuses
from capfleet.api import kinds
from capfleet.conditions import Update
from ipam_address import netbox_pools, pools
from ipam_address.contexts import Context

SETTLE_SECONDS = 2.0


def desired_status(body: Mapping[str, Any], allocated: Iterable[str]) -> dict[str, Any]:
    """Counts and Ready for a pool whose allocated addresses (per the index) are `allocated`."""
    info = pools.info_of(body)
    current = body.get("status") or {}
    try:
        space = pools.space_of(info)
    except errors.InvalidSpec as exc:
        ready = Update.false(conditions.READY, exc.reason, exc.message)
        counts = None
    else:
        addresses = list(allocated)
        inside = sum(1 for address in addresses if address in space)
        total = space.total
        counts = {
            "total": min(total, 2**63 - 1),
            "used": inside,
            "free": min(total - inside, 2**63 - 1),
            "outOfRange": len(addresses) - inside,
        }
        ready = (
            Update.true(conditions.READY, "Ready", f"{counts['free']} of {counts['total']} addresses free")
            if counts["free"]
            else Update.true(conditions.READY, "Exhausted", f"all {counts['total']} addresses are allocated")
        )
    status: dict[str, Any] = {
        "conditions": statuses.with_conditions(
            current, [ready], generation=body["metadata"].get("generation")
        )
    }
    if counts is not None:
        status["ipAddresses"] = counts
    return status


def in_use_status(body: Mapping[str, Any], message: str) -> dict[str, Any]:
    """The status of a pool whose deletion waits for its addresses to be released."""
    update = Update.false(conditions.READY, "PoolInUse", message)
    generation = body["metadata"].get("generation")
    return {"conditions": statuses.with_conditions(body.get("status") or {}, [update], generation=generation)}


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    """Write an in-cluster pool's counts and Ready where they differ from its status; the counts are also
    exported as `capfleet_pool_addresses`."""
    key = pools.info_of(body).key
    desired = desired_status(body, ctx.lookups.addresses(key))
    if "ipAddresses" in desired:
        metrics.record_pool(key.namespace, key.name, desired["ipAddresses"])
    changed = statuses.differences(body.get("status") or {}, desired)
    if changed:
        await ctx.kube.patch_status(kinds.HYBRID_IPPOOL.resource, key.name, changed, key.namespace)


async def finalize(ctx: Context, body: Mapping[str, Any]) -> None:
    """A pool's deletion: held, saying so on Ready, while addresses of it are allocated; then the NetBox
    pool's connection Secret is let go of."""
    key = pools.info_of(body).key
    in_use = len(ctx.lookups.addresses(key))
    if in_use:
        message = (
            f"{in_use} addresses are still allocated from this pool; it is deleted when they are released"
        )
        changed = statuses.differences(body.get("status") or {}, in_use_status(body, message))
        if changed:
            resource = (
                kinds.HYBRID_IPPOOL.resource if key.kind == pools.IN_CLUSTER else kinds.NETBOX_IPPOOL.resource
            )
            await ctx.kube.patch_status(resource, key.name, changed, key.namespace)
        raise errors.Waiting(message, reason="PoolInUse")
    metrics.forget_pool(key.namespace, key.name)
    await netbox_pools.let_go(ctx.kube, body)


async def check_netbox(ctx: Context, body: Mapping[str, Any]) -> None:
    """Check a NetBox pool and write its Ready where it changed; raise (to retry) when the check failed."""
    status: dict[str, Any] = {}
    try:
        await netbox_pools.check_into(ctx.kube, ctx.netbox_clients, body, status)
    finally:
        if status:
            meta = body["metadata"]
            await ctx.kube.patch_status(kinds.NETBOX_IPPOOL.resource, meta["name"], status, meta["namespace"])
