"""Serving one NetboxDevice: find the device it holds or claim one, and write its status and conditions.

Level-triggered: every trigger (creation, a restart, a retry, a wiped status) runs `serve`, which first
asks NetBox which device this object's owner value holds, so the decision is never taken twice. Failures
become a Ready=False condition carrying NetBox's message and an Event on the transition, and are raised
again for kopf to retry with the error's own backoff; waiting for a free device retries at the
configured poll interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions, errors, pausing, reconciling
from capfleet.api import kinds
from capfleet.api.netbox import NetboxDevice
from capfleet.conditions import Update
from netbox_device import claiming, contexts, device_status, selection
from netbox_device.backends.devices import Record
from netbox_device.contexts import Context, record

RESOURCE = kinds.NETBOX_DEVICE.resource


class NoFreeDevice(errors.Waiting):
    """No device matches the selector right now; looked for again every `interval` seconds."""

    default_reason = "NoFreeDevice"

    def __init__(self, message: str, interval: float) -> None:
        super().__init__(message)
        self.interval = interval

    def delay(self, retry: int) -> float | None:
        return self.interval


class ClaimContended(errors.Waiting):
    """Every free device this claim tried went to another claimant first: there may be more, so it looks
    again soon rather than after the poll interval."""

    default_reason = "ClaimContended"
    retry_base = 1.0
    retry_cap = 10.0


def claimed(device: Record, interfaces: list[Record]) -> tuple[dict[str, Any], Update]:
    """The status fields of the held device, and the Ready that names it."""
    fields = device_status.device_fields(device, interfaces)
    message = f"device {fields['name'] or '#' + str(fields['deviceID'])} (NetBox id {fields['deviceID']})"
    return fields, Update.true(conditions.READY, "Claimed", message)


async def hold_or_claim(ctx: Context, claim: NetboxDevice) -> tuple[dict[str, Any], Update]:
    """The device this object holds, claiming one first when it holds none; raises to retry."""
    devices = await ctx.devices(claim)
    looked_up = await claiming.held_by(devices, await ctx.possible_owners(claim))

    async def holds(owner: str) -> Record | None:
        if owner not in looked_up:
            looked_up[owner] = await claiming.held(devices, owner)
        return looked_up[owner]

    owner = await ctx.settled_owner(RESOURCE, claim, holds)
    device = await holds(owner)
    if device is None:
        spec = claim.spec
        claimant = claiming.Claimant(owner, spec.selector, spec.claim, ctx.settings.settle_seconds)
        taken = await claiming.take(devices, claimant, ctx.shared.free)
        device = taken.device
        if device is None and taken.tried:
            raise ClaimContended(f"the free devices listed went to other claims first ({taken.tried} tried)")
        if device is None:
            raise NoFreeDevice(
                f"no free device matches the selector ({selection.describe(spec.selector)})",
                ctx.settings.poll_seconds,
            )
    return claimed(device, await devices.interfaces(int(device["id"])))


async def serve(ctx: Context, body: Mapping[str, Any]) -> None:
    claim = kinds.NETBOX_DEVICE.parse(body)
    await contexts.serve(ctx, RESOURCE, body, lambda: hold_or_claim(ctx, claim), "Claimed")


def has_status(claim: NetboxDevice) -> bool:
    return claim.status is not None and bool(claim.status.device_id or claim.status.conditions)


async def repair(ctx: Context, body: Mapping[str, Any]) -> None:
    """Rebuild a wiped status from the device the owner field names; never claims (its handler does)."""
    claim = kinds.NETBOX_DEVICE.parse(body)
    if claim.metadata.get("deletionTimestamp") or has_status(claim) or pausing.hands_off(body["metadata"]):
        return
    try:
        devices = await ctx.devices(claim)
        device = await claiming.held(devices, ctx.owner(claim))
    except errors.CapfleetError:
        return  # NetBox cannot tell now; the claim handler reports why and retries
    if device is not None:
        found = claimed(device, await devices.interfaces(int(device["id"])))
        await record(reconciling.Recorder(ctx, RESOURCE, body, None), *found)


async def release(ctx: Context, body: Mapping[str, Any]) -> None:
    """Give the device back (unless the object is being moved), then the Secret; paused objects wait."""
    claim = kinds.NETBOX_DEVICE.parse(body)

    async def give_back() -> None:
        await claiming.release(await ctx.devices(claim), ctx.owner(claim))

    await ctx.release(body, claim, "the device is released", give_back)
