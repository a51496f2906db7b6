"""Serving one NetboxVirtualMachine: register it in NetBox, rebuild its status, deregister it.

Like device claims: level-triggered, the owner custom field finds the record again, paused objects are
left alone, and a delete for clusterctl move leaves NetBox untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions, errors, pausing
from capfleet.api import kinds
from capfleet.conditions import Update
from netbox_device import registering, reporting, selection
from netbox_device.device_claims import Context, for_move

RESOURCE = kinds.NETBOX_VIRTUAL_MACHINE.resource


def registered_status(body: Mapping[str, Any], vm_id: int) -> dict[str, Any]:
    ready = Update.true(conditions.READY, "Registered", f"virtual machine #{vm_id} in NetBox")
    return reporting.status_with(body, {"virtualMachineID": vm_id}, pausing.condition(False), ready)


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    if pausing.hands_off(meta):
        return reporting.status_with(body, {}, pausing.condition(True))
    nb = await ctx.clients.machines(ctx.kube, body)
    vm_id = await registering.register(
        nb, body.get("spec") or {}, selection.owner_of(ctx.settings.instance, meta)
    )
    return registered_status(body, vm_id)


async def serve(ctx: Context, body: Mapping[str, Any]) -> None:
    await reporting.serve(ctx.kube, ctx.recorder, RESOURCE, body, reconcile(ctx, body))


async def repair(ctx: Context, body: Mapping[str, Any]) -> None:
    """Rebuild a wiped status from the VM the owner field names."""
    meta, status = body["metadata"], body.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("virtualMachineID") or status.get("conditions"):
        return
    if pausing.hands_off(meta):
        return
    try:
        nb = await ctx.clients.machines(ctx.kube, body)
        vm = await registering.held(nb, selection.owner_of(ctx.settings.instance, meta))
    except errors.CapfleetError:
        return  # NetBox cannot tell now; the register handler reports why and retries
    if vm is not None:
        await reporting.write_status(ctx.kube, RESOURCE, body, registered_status(body, int(vm["id"])))


async def release(ctx: Context, body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    if for_move(meta):
        return
    if pausing.annotated(meta):
        raise errors.Waiting("paused: the VM is deregistered once the object is unpaused", reason="Paused")
    nb = await ctx.clients.machines(ctx.kube, body)
    await registering.deregister(nb, selection.owner_of(ctx.settings.instance, meta))
