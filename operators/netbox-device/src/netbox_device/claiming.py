"""Claiming one free device atomically, finding it again, and giving it back.

The claim is a single write of owner, remembered state, status, tenant and description:
- NetBox ≥ 4.6: read the device with its ETag, check it is still free, PATCH with If-Match. A 412 means
  another claimant wrote first; the next candidate is tried. This is a true compare-and-set.
- Older NetBox: check the device is free, write the claim, wait `settle` seconds, read it back. When two
  claimants race, the later write replaces the earlier one completely (last writer wins), and the earlier
  writer sees the other owner on reading back and moves on. This holds as long as no claimant takes
  longer than `settle` between its read and its write (a claimant that took longer gives that device up
  unwritten). A write already sent can still land late, within NetBox's request timeout, so a fresh claim
  is checked again once that has passed (`RECHECK_SECONDS`): `held` re-reads the owner field on every
  reconcile, and a claim lost even then is noticed and redone, never silently shared.
Claims made by one process never race each other, and share their listings of free devices: see
`FreeDevices`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet import netbox
from capfleet.api.netbox import DeviceClaim, DeviceSelector
from netbox_device.backends.devices import Devices, Record
from netbox_device.selection import (
    OWNER_FIELD,
    claim_fields,
    device_filters,
    matches,
    release_fields,
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
    return (await held_by(devices, [owner]))[owner]


async def held_by(devices: Devices, owners: Sequence[str]) -> dict[str, Record | None]:
    """The device each of `owners` holds (None: none), asked of NetBox at once; extras go back as in
    `held`."""
    found: dict[str, list[Record]] = {owner: [] for owner in owners}
    for device in await devices.owned(owners):
        found[owner_field(device)].append(device)
    for owner, owned in found.items():
        for extra in owned[1:]:
            await release_device(devices, extra, owner, "held twice after a race; keeping the lower id")
    return {owner: owned[0] if owned else None for owner, owned in found.items()}


RECHECK_SECONDS = netbox.DEFAULT_TIMEOUT
"""After a claim on NetBox before 4.6, plus the settle delay: when a claim is checked again (another
claimant's write sent before this claim's read-back has landed or failed by then)."""
ATTEMPTS = 5
"""Devices one claim tries before it gives way (`Taken.tried`) and is retried soon."""
FRESH_SECONDS = 30.0
"""How long a listing of free devices is handed out: past it, the next claim lists afresh."""


class FreeDevices:
    """The devices one process's claims are trying, and the free devices listed for them, per selector.

    Claims of one process never race each other: `trying` holds the devices being tried right now, and a
    listing leaves them out. And they share listings: a claim takes the next device listed free for its
    selector, and only a claim that finds none left lists again, one listing per selector at a time, the
    claims that arrive meanwhile waiting for it: a listing per claim would queue among NetBox's calls and,
    by its turn, show devices other claims here had already taken. Another process (a second
    management cluster) may claim a listed device before this one tries it: `attempt` reads every device
    before writing, so that costs a read; listings older than `fresh_seconds` are not handed out. Listed
    devices are tried in random order, so processes listing the same page try different devices first.
    """

    def __init__(
        self, fresh_seconds: float = FRESH_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.trying: set[int] = set()
        self.fresh_seconds = fresh_seconds
        self._clock = clock
        self._listed: dict[str, tuple[float, list[int]]] = {}
        self._listings: dict[str, asyncio.Future[bool]] = {}

    async def next(self, devices: Devices, filters: Mapping[str, Any]) -> int | None:
        """A device listed free for `filters` that no claim here is trying; None once a listing finds
        none."""
        # Per NetBox client (one per connection Secret): claims on another NetBox share nothing with these.
        key = f"{id(devices)}:{json.dumps(filters, sort_keys=True, default=str)}"
        while (found := self._pop(key)) is None:
            listing = self._listings.get(key)
            if listing is None:
                listing = asyncio.ensure_future(self._list(devices, key, filters))
                self._listings[key] = listing
                listing.add_done_callback(lambda done: self._listed_done(key, done))
            if not await asyncio.shield(listing):
                return None
        return found

    def _pop(self, key: str) -> int | None:
        listed_at, ids = self._listed.get(key, (0.0, []))
        if self._clock() - listed_at > self.fresh_seconds:
            self._listed.pop(key, None)
            return None
        while ids:
            device_id = ids.pop()
            if device_id not in self.trying:
                return device_id
        return None

    async def _list(self, devices: Devices, key: str, filters: Mapping[str, Any]) -> bool:
        query = dict(filters)
        if self.trying:
            query["id__n"] = sorted(self.trying)
        ids = [int(candidate["id"]) for candidate in await devices.candidates(query)]
        random.shuffle(ids)
        self._listed[key] = (self._clock(), ids)
        return bool(ids)

    def _listed_done(self, key: str, listing: asyncio.Future[bool]) -> None:
        if self._listings.get(key) is listing:
            del self._listings[key]
        if not listing.cancelled():
            listing.exception()  # retrieved: every claim waiting for it has been given it


@dataclass(frozen=True)
class Taken:
    """What a claim came to: the device won, or None, and how many devices it tried (tried but not won:
    others were quicker, and there may be more; none tried: none is free)."""

    device: Record | None
    tried: int


async def take(devices: Devices, claimant: Claimant, free: FreeDevices) -> Taken:
    """Claim one free device matching the selector that no claim of this process is trying."""
    tenant = claimant.claim.tenant
    tenant_id = await devices.tenant_id(tenant) if tenant else None
    filters = device_filters(claimant.selector)
    tried = 0
    while tried < ATTEMPTS and (device_id := await free.next(devices, filters)) is not None:
        free.trying.add(device_id)
        tried += 1
        try:
            won = await attempt(devices, device_id, claimant, tenant_id)
        finally:
            free.trying.discard(device_id)
        if won is not None:
            return Taken(won, tried)
    return Taken(None, tried)


async def attempt(
    devices: Devices, device_id: int, claimant: Claimant, tenant_id: int | None
) -> Record | None:
    """Try to claim one device; None when it is no longer free or another claimant won it."""
    device, etag = await devices.read(device_id)
    read_at = time.monotonic()
    if device is None or not matches(device, claimant.selector):
        return None
    fields = claim_fields(device, claimant.owner, claimant.claim, tenant_id)
    if devices.etags:
        claimed = await devices.write(device_id, fields, etag)  # compare-and-set: its answer is the claim
    else:
        if time.monotonic() - read_at > claimant.settle_seconds:
            # Read free too long ago: written now, it could land after another claimant's read-back.
            return None
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
    owned = await devices.owned([owner])
    for device in owned:
        await release_device(devices, device, owner, "the NetboxDevice was deleted")
    return len(owned)
