"""Serving one NetboxVirtualMachine: register it in NetBox, rebuild its status, deregister it.

Like device claims: level-triggered, the owner custom field finds the record again, paused objects are
left alone, and a delete for clusterctl move leaves NetBox untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions
from capfleet.api import kinds
from capfleet.api.netbox import NetboxVirtualMachine
from capfleet.conditions import Update
from netbox_device import contexts, registering
from netbox_device.contexts import Context

RESOURCE = kinds.NETBOX_VIRTUAL_MACHINE.resource


def registered(vm_id: int) -> tuple[dict[str, Any], Update]:
    """The status fields of the registered VM, and the Ready that names it."""
    ready = Update.true(conditions.READY, "Registered", f"virtual machine #{vm_id} in NetBox")
    return {"virtualMachineID": vm_id}, ready


async def register(ctx: Context, vm: NetboxVirtualMachine) -> tuple[dict[str, Any], Update]:
    nb = await ctx.machines(vm)
    holdings = registering.Holdings(nb)
    await holdings.ask(await ctx.possible_owners(vm))
    owner = await ctx.settled_owner(RESOURCE, vm, holdings.held)
    return registered(await registering.register(nb, vm.spec, owner, holdings))


async def serve(ctx: Context, body: Mapping[str, Any]) -> None:
    vm = kinds.NETBOX_VIRTUAL_MACHINE.parse(body)
    await contexts.serve(ctx, RESOURCE, body, lambda: register(ctx, vm), "Registered")


async def release(ctx: Context, body: Mapping[str, Any]) -> None:
    vm = kinds.NETBOX_VIRTUAL_MACHINE.parse(body)

    async def give_back() -> None:
        await registering.deregister(await ctx.machines(vm), ctx.owner(vm))

    await ctx.release(body, vm, "the VM is deregistered", give_back)
