"""Claiming one free device atomically, finding it again, and giving it back.

The claim is a single write of owner, remembered state, status, tenant and description:
- NetBox ≥ 4.6: read the device with its ETag, check it is still free, PATCH with If-Match. A 412 means
  another claimant wrote first; the next candidate is tried. This is a true compare-and-set.
- Older NetBox: check the device is free, write the claim, wait `settle` seconds, read it back. When two
  claimants race, the later write replaces the earlier one completely (last writer wins), and the earlier
  writer sees the other owner on reading back and moves on. This holds as long as no claimant takes
  longer than `settle` between its read and its write; `held` re-reads the owner field on every
  reconcile, so a claim lost even then is noticed and redone, never silently shared.
Claims made by this process never race each other: `reserved` holds the devices being tried right now, and
the listing of candidates leaves them out, so hundreds of claims at once are each shown devices nobody here
is trying (a page of free devices is 25: listed in full, all of them in flight, a claim found "no free
device" while hundreds were free, and waited a whole poll interval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet.api.netbox import DeviceClaim, DeviceSelector
from netbox_device.backends.devices import Devices, Record
from netbox_device.selection import (
    OWNER_FIELD,
    claim_fields,
    device_filters,
    matches,
    release_fields,
    spread,
)


@dataclass(frozen=True)
class Claimant:
    owner: str
    selector: DeviceSelector
    claim: DeviceClaim
    settle_seconds: float = 1.0


def owner_field(device: Mapping[str, Any]) -> Any:
    return (device.get("custom_fields") or {}).get(OWNER_FIELD)


async def held(devices: Devices, owner: str) -> Record | None:
    """The device this owner holds; if a race between replicas left it two, the extra ones go back."""
    owned = await devices.owned(owner)
    for extra in owned[1:]:
        await release_device(devices, extra, owner, "held twice after a race; keeping the lower id")
    return owned[0] if owned else None


# Listings one claim makes when every device listed is being tried by other claims of this process.
LISTINGS = 5


@dataclass(frozen=True)
class Taken:
    """What a claim came to: the device won, or None; how many devices it tried, and whether any free one
    was listed (listed but not won: others were quicker, and there may be more; none listed: none free)."""

    device: Record | None
    tried: int
    listed: bool


async def take(devices: Devices, claimant: Claimant, reserved: set[int]) -> Taken:
    """Claim one free device matching the selector that no claim of this process is trying."""
    tenant = claimant.claim.tenant
    tenant_id = await devices.tenant_id(tenant) if tenant else None
    tried, listed = 0, False
    for _ in range(LISTINGS):
        filters = device_filters(claimant.selector)
        if reserved:
            filters["id__n"] = sorted(reserved)
        candidates = await devices.candidates(filters)
        if not candidates:
            break
        listed = True
        # Claims listed at the same moment are shown the same page: those another claim here took up
        # while this one waited for its listing are left to it, and listed past if none is left.
        for candidate in spread([c for c in candidates if int(c["id"]) not in reserved], claimant.owner):
            device_id = int(candidate["id"])
            if device_id in reserved:
                continue
            reserved.add(device_id)
            tried += 1
            try:
                won = await attempt(devices, device_id, claimant, tenant_id)
            finally:
                reserved.discard(device_id)
            if won is not None:
                return Taken(won, tried, listed)
        if tried:
            break  # others were quicker: the caller looks again soon
    return Taken(None, tried, listed)


async def attempt(
    devices: Devices, device_id: int, claimant: Claimant, tenant_id: int | None
) -> Record | None:
    """Try to claim one device; None when it is no longer free or another claimant won it."""
    device, etag = await devices.read(device_id)
    if device is None or not matches(device, claimant.selector):
        return None
    fields = claim_fields(device, claimant.owner, claimant.claim, tenant_id)
    if devices.etags:
        if not await devices.write(device_id, fields, etag):
            return None
    else:
        await devices.write(device_id, fields)
        await asyncio.sleep(claimant.settle_seconds)
    claimed, _ = await devices.read(device_id)
    if claimed is None or owner_field(claimed) != claimant.owner:
        return None
    note = f"Claimed by capfleet for {claimant.owner}; status {fields['status']}"
    await devices.journal(device_id, "info", note)
    return claimed


async def release_device(devices: Devices, device: Mapping[str, Any], owner: str, why: str) -> None:
    if owner_field(device) != owner:
        return
    await devices.write(int(device["id"]), release_fields(device))
    await devices.journal(int(device["id"]), "info", f"Released by capfleet for {owner}: {why}")


async def release(devices: Devices, owner: str) -> int:
    """Give back every device this owner holds, as it was before the claim; returns how many."""
    owned = await devices.owned(owner)
    for device in owned:
        await release_device(devices, device, owner, "the NetboxDevice was deleted")
    return len(owned)
