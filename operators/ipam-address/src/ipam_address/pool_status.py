"""An in-cluster pool's status: Ready and address counts, written only when they change.

Counting walks the pool's allocated addresses, so it runs in one background task per pool that wakes on
change signals and coalesces a burst of allocations, never writing once per claim: a change after a quiet
spell is written within half a second, and while changes keep coming the counts are written at most every
five seconds, so a burst of claims costs a handful of writes, not one per claim.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from capfleet import conditions, errors, metrics, statuses
from capfleet.api import kinds
from capfleet.conditions import Update
from capfleet.kube import Kube
from ipam_address import pools
from ipam_address.allocator import Allocator

COALESCE_SECONDS = 0.5
BURST_WRITE_SECONDS = 5.0
IDLE_CHECK_SECONDS = 60.0


def coalescing_delay(since_last_write: float) -> float:
    """How long to gather changes before writing, `since_last_write` seconds after the last write."""
    return max(COALESCE_SECONDS, BURST_WRITE_SECONDS - since_last_write)


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


async def keep(
    kube: Kube,
    allocator: Allocator,
    body: Mapping[str, Any],
    allocated: Callable[[], list[str]],
    stopped: Callable[[], bool],
) -> None:
    """Keep the pool's status current until `stopped`; `body` is kopf's live view of the pool.

    Between changes it compares with what it wrote last (kopf's view lags its own writes); after an idle
    minute, with kopf's view, which by then shows its writes, so a status wiped by someone else is
    written again. The counts are also exported as `capfleet_pool_addresses` while it runs."""
    key = pools.info_of(body).key
    written: dict[str, Any] = dict(body.get("status") or {})
    last_write = -math.inf
    try:
        while not stopped():
            desired = desired_status({**body, "status": written}, allocated())
            if "ipAddresses" in desired:
                metrics.record_pool(key.namespace, key.name, desired["ipAddresses"])
            changed = statuses.differences(written, desired)
            if changed:
                await kube.patch_status(kinds.HYBRID_IPPOOL.resource, key.name, changed, key.namespace)
                written.update(changed)
                last_write = time.monotonic()
            if await allocator.wait_for_change(key, IDLE_CHECK_SECONDS):
                await asyncio.sleep(coalescing_delay(time.monotonic() - last_write))
            else:
                written = dict(body.get("status") or {})
    finally:
        metrics.forget_pool(key.namespace, key.name)
