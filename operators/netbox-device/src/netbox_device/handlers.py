"""kopf handlers of the netbox-device operator: decorators and typed arguments only, logic lives elsewhere.

NetboxDevice objects claim a free device (device_claims); NetboxVirtualMachine objects register a VM
(vm_serving). Every change runs the same level-triggered reconcile; watch events rebuild a wiped status
from NetBox; deletion releases what the object holds in NetBox.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from capfleet import runtime
from capfleet.api import kinds
from netbox_device import device_claims, vm_serving
from netbox_device.clients import Clients, Settings

IDENTITY = runtime.Identity("netbox-device")
DEVICES = (kinds.NETBOX_GROUP, kinds.VERSION, "netboxdevices")
MACHINES = (kinds.NETBOX_GROUP, kinds.VERSION, "netboxvirtualmachines")


@kopf.on.startup()
def create_clients(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo["netbox_clients"] = Clients()
    memo["settings"] = Settings.from_environ(os.environ)
    memo["reserved_devices"] = set()


def context(memo: kopf.Memo) -> device_claims.Context:
    clients, settings, reserved = (
        memo.get("netbox_clients"),
        memo.get("settings"),
        memo.get("reserved_devices"),
    )
    if (
        not isinstance(clients, Clients)
        or not isinstance(settings, Settings)
        or not isinstance(reserved, set)
    ):
        raise RuntimeError("netbox-device did not start: no NetBox clients in memo")
    return device_claims.Context(runtime.kube(memo), runtime.recorder(memo), clients, settings, reserved)


@kopf.on.resume(*DEVICES)
@kopf.on.create(*DEVICES)
@kopf.on.update(*DEVICES)
@runtime.reconciler("NetboxDevice")
async def claim_device(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await device_claims.serve(context(memo), body)


@kopf.on.event(*DEVICES)
async def repair_device_status(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type in {"ADDED", "MODIFIED"}:
        await device_claims.repair(context(memo), body)


@kopf.on.delete(*DEVICES)
@runtime.reconciler("NetboxDevice")
async def release_device(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await device_claims.release(context(memo), body)


@kopf.on.resume(*MACHINES)
@kopf.on.create(*MACHINES)
@kopf.on.update(*MACHINES)
@runtime.reconciler("NetboxVirtualMachine")
async def register_machine(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vm_serving.serve(context(memo), body)


@kopf.on.event(*MACHINES)
async def repair_machine_status(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type in {"ADDED", "MODIFIED"}:
        await vm_serving.repair(context(memo), body)


@kopf.on.delete(*MACHINES)
@runtime.reconciler("NetboxVirtualMachine")
async def deregister_machine(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vm_serving.release(context(memo), body)
