"""Serving one NetboxDevice: find the device it holds or claim one, and write its status and conditions.

Level-triggered: every trigger (creation, a restart, a retry, a wiped status) runs `serve`, which first
asks NetBox which device this object's owner value holds, so the decision is never taken twice. Failures
become a Ready=False condition carrying NetBox's message and an Event on the transition, and are raised
again for the engine to retry with the error's own backoff; waiting for a free device retries at the
configured poll interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import conditions, errors
from capfleet.api import kinds
from capfleet.api.netbox import NetboxDevice
from capfleet.conditions import Update
from capfleet.controller.engine import DONE, Result
from netbox_device import claiming, contexts, device_status, selection
from netbox_device.backends.devices import Record
from netbox_device.contexts import Context

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


@dataclass
class Held:
    """What a pass found the claim holds: its status fields and Ready, and when to look again (a claim
    made just now on NetBox before 4.6, which another claimant's late write could still take)."""

    fields: dict[str, Any]
    ready: Update
    recheck: Result = DONE


async def hold_or_claim(ctx: Context, claim: NetboxDevice) -> Held:
    """The device this object holds, claiming one first when it holds none; raises to retry."""
    devices = await ctx.devices(claim)
    looked_up = await claiming.held_by(devices, await ctx.possible_owners(claim))

    async def holds(owner: str) -> Record | None:
        if owner not in looked_up:
            looked_up[owner] = await claiming.held(devices, owner)
        return looked_up[owner]

    owner = await ctx.settled_owner(RESOURCE, claim, holds)
    device = await holds(owner)
    recheck = DONE
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
        if not devices.etags:
            recheck = Result(claimant.settle_seconds + claiming.RECHECK_SECONDS)
    return Held(*claimed(device, await devices.interfaces(int(device["id"]))), recheck)


async def serve(ctx: Context, body: Mapping[str, Any]) -> Result:
    claim = kinds.NETBOX_DEVICE.parse(body)
    found: list[Held] = []

    async def work() -> tuple[dict[str, Any], Update]:
        found.append(await hold_or_claim(ctx, claim))
        return found[-1].fields, found[-1].ready

    await contexts.serve(ctx, RESOURCE, body, work, "Claimed")
    return found[-1].recheck if found else DONE


async def release(ctx: Context, body: Mapping[str, Any]) -> None:
    """Give the device back (unless the object is being moved), then the Secret; paused objects wait."""
    claim = kinds.NETBOX_DEVICE.parse(body)

    async def give_back() -> None:
        await claiming.release(await ctx.devices(claim), ctx.owner(claim))

    await ctx.release(body, claim, "the device is released", give_back)
