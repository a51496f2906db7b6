"""VMQuotas against the API: the check placement makes, and each quota's status (what is used).

Placement (`vms.place`) calls `admit` under its lock, so the counts it reads include every VM placed
before; a VM that does not fit waits with `QuotaExceeded` and is tried again within seconds, so it is
placed soon after room frees up. Status is a cache: `refresh` counts the namespace's VMs again (from the
index of placed VMs, `placements`) and writes each quota's status only when it differs. Events of
VMQuotas and LibvirtVMs ask for a refresh, and concurrent asks for one namespace fold into at most one
more run (`refresh_soon`). VMQuotas carry no finalizer and no annotation of this operator's: deleting
one never waits for anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from capfleet import errors
from capfleet.api import kinds
from capfleet.api.libvirt import QuotaLimits, QuotaUsage
from libvirt_vm import placements, placing, quotas
from libvirt_vm.contexts import Context

QUOTAS = kinds.VM_QUOTA.resource


class QuotaExceeded(errors.Waiting):
    """A VM waits for room under its namespace's quotas; tried again soon, since room frees up when any
    VM of the namespace goes."""

    default_reason = "QuotaExceeded"
    retry_base = 5.0
    retry_cap = 15.0


async def limits_in(ctx: Context, namespace: str) -> list[tuple[str, QuotaLimits]]:
    found = await ctx.kube.list(QUOTAS, namespace)
    return [(body["metadata"]["name"], kinds.VM_QUOTA.parse(body).spec.hard) for body in found]


def used_by(vms: Iterable[placements.PlacedVM], namespace: str) -> QuotaUsage:
    return quotas.usage([vm.demand for vm in vms if vm.namespace == namespace])


async def admit(
    ctx: Context, namespace: str, demand: placing.Demand, placed: Iterable[placements.PlacedVM]
) -> None:
    """Nothing if `demand` fits under every quota of `namespace`, given the VMs `placed` now; QuotaExceeded
    naming each limit it would cross otherwise. Call it under the placement lock."""
    limits = await limits_in(ctx, namespace)
    if not limits:
        return
    refused = quotas.refusal(limits, used_by(placed, namespace), demand)
    if refused is not None:
        raise QuotaExceeded(refused)


def status_of(hard: QuotaLimits, used: QuotaUsage) -> dict[str, Any]:
    return {
        "hard": hard.model_dump(by_alias=True, exclude_none=True),
        "used": used.model_dump(by_alias=True),
    }


async def refresh(ctx: Context, namespace: str) -> None:
    """Write each quota of `namespace` its status, where it differs from what the VMs say now."""
    found = await ctx.kube.list(QUOTAS, namespace)
    if not found:
        return
    used = used_by(ctx.shared.placements.all(), namespace)
    for body in found:
        wanted = status_of(kinds.VM_QUOTA.parse(body).spec.hard, used)
        current = body.get("status") or {}
        if {key: current.get(key) for key in wanted} != wanted:
            await ctx.kube.patch_status(QUOTAS, body["metadata"]["name"], wanted, namespace)


async def refresh_soon(ctx: Context, namespace: str) -> None:
    """`refresh`, folding concurrent asks: while one runs for the namespace, further asks make it run once
    more when it ends instead of running beside it."""
    shared = ctx.shared
    shared.quota_dirty.add(namespace)
    lock = shared.quota_locks.setdefault(namespace, asyncio.Lock())
    if lock.locked():
        return
    async with lock:
        while namespace in shared.quota_dirty:
            shared.quota_dirty.discard(namespace)
            await refresh(ctx, namespace)


def changes_usage(ctx: Context, event_type: str | None, body: Mapping[str, Any]) -> bool:
    """Whether a LibvirtVM event may change what its namespace uses: it is gone, newly placed, or placed
    and asking for something else than when last seen. Remembers what it saw."""
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    seen = ctx.shared.counted_vms
    if event_type == "DELETED":
        return seen.pop(key, None) is not None
    vm = kinds.LIBVIRT_VM.parse(body)
    if not vm.spec.hypervisor_name:
        return False
    demand = placements.demand_of(vm)
    if seen.get(key) == demand:
        return False
    seen[key] = demand
    return True
