"""Serving one NetboxDevice: find the device it holds or claim one, and write its status and conditions.

Level-triggered: every trigger (creation, a restart, a retry, a wiped status) runs `reconcile`, which
first asks NetBox which device this object's owner value holds, so the decision is never taken twice.
Failures become a Ready=False condition carrying NetBox's message and an Event on the transition, and
are raised again for kopf to retry with the error's own backoff; waiting for a free device retries at
the configured poll interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import conditions, errors, events, pausing
from capfleet.api import kinds
from capfleet.conditions import Update
from capfleet.kube import Kube
from netbox_device import claiming, device_status, reporting, selection
from netbox_device.clients import Clients, Settings

DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"
RESOURCE = kinds.NETBOX_DEVICE.resource


class NoFreeDevice(errors.Waiting):
    """No device matches the selector right now; looked for again every `interval` seconds."""

    default_reason = "NoFreeDevice"

    def __init__(self, message: str, interval: float) -> None:
        super().__init__(message)
        self.interval = interval

    def delay(self, retry: int) -> float | None:
        return self.interval


@dataclass
class Context:
    kube: Kube
    recorder: events.Recorder
    clients: Clients
    settings: Settings
    reserved: set[int] = field(default_factory=set)


def for_move(meta: Mapping[str, Any]) -> bool:
    return DELETE_FOR_MOVE in (meta.get("annotations") or {})


def claimed_status(
    body: Mapping[str, Any], device: Mapping[str, Any], interfaces: list[dict[str, Any]]
) -> dict[str, Any]:
    fields = device_status.device_fields(device, interfaces)
    message = f"device {fields['name'] or '#' + str(fields['deviceID'])} (NetBox id {fields['deviceID']})"
    return reporting.status_with(
        body, fields, pausing.condition(False), Update.true(conditions.READY, "Claimed", message)
    )


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """The object's desired status after holding (or claiming) its device; raises to retry."""
    meta, spec = body["metadata"], body.get("spec") or {}
    if pausing.hands_off(meta):
        return reporting.status_with(body, {}, pausing.condition(True))
    devices = await ctx.clients.devices(ctx.kube, body)
    owner = selection.owner_of(ctx.settings.instance, meta)
    device = await claiming.held(devices, owner)
    if device is None:
        selector = spec.get("selector") or {}
        claimant = claiming.Claimant(owner, selector, spec.get("claim") or {}, ctx.settings.settle_seconds)
        device = await claiming.take(devices, claimant, ctx.reserved)
        if device is None:
            raise NoFreeDevice(
                f"no free device matches the selector ({selection.describe(selector)})",
                ctx.settings.poll_seconds,
            )
    return claimed_status(body, device, await devices.interfaces(int(device["id"])))


async def serve(ctx: Context, body: Mapping[str, Any]) -> None:
    await reporting.serve(ctx.kube, ctx.recorder, RESOURCE, body, reconcile(ctx, body))


async def repair(ctx: Context, body: Mapping[str, Any]) -> None:
    """Rebuild a wiped status from the device the owner field names; never claims (its handler does)."""
    meta, status = body["metadata"], body.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("deviceID") or status.get("conditions"):
        return
    if pausing.hands_off(meta):
        return
    try:
        devices = await ctx.clients.devices(ctx.kube, body)
        device = await claiming.held(devices, selection.owner_of(ctx.settings.instance, meta))
    except errors.CapfleetError:
        return  # NetBox cannot tell now; the claim handler reports why and retries
    if device is not None:
        desired = claimed_status(body, device, await devices.interfaces(int(device["id"])))
        await reporting.write_status(ctx.kube, RESOURCE, body, desired)


async def release(ctx: Context, body: Mapping[str, Any]) -> None:
    """Give the device back (unless the object is being moved); paused objects wait."""
    meta = body["metadata"]
    if for_move(meta):
        return
    if pausing.annotated(meta):
        raise errors.Waiting("paused: the device is released once the object is unpaused", reason="Paused")
    devices = await ctx.clients.devices(ctx.kube, body)
    await claiming.release(devices, selection.owner_of(ctx.settings.instance, meta))
