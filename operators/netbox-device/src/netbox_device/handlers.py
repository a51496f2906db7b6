"""netbox-device's controllers: NetboxDevice objects claim a free device (device_claims), NetboxVirtualMachine
objects register a VM (vm_serving), both on the fleet's engine.

Each reconcile is level-triggered: it asks NetBox what the object's owner value holds before it claims or
registers anything, so a change, a restart, the resync or a wiped status all run the same `serve`, which
also rebuilds the status. Deletion releases what the object holds in NetBox.
"""

from __future__ import annotations

from typing import Any

import kopf

from capfleet import runtime
from capfleet.api import kinds
from capfleet.controller import watching
from capfleet.controller.caches import Reads
from capfleet.controller.engine import Controller, done_after
from netbox_device import device_claims, vm_serving
from netbox_device.contexts import SHARED_KEY, Context, Shared

IDENTITY = runtime.Identity("netbox-device", on_engine=True)
runtime.count_phases(kinds.NETBOX_DEVICE.resource)
runtime.count_phases(kinds.NETBOX_VIRTUAL_MACHINE.resource)


@kopf.on.startup()
def create_shared(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo[SHARED_KEY] = Shared()


DEVICE_CONTROLLER: Controller[Context] = Controller(
    kinds.NETBOX_DEVICE.resource,
    IDENTITY.finalizer,
    device_claims.serve,
    done_after(device_claims.release),
)
MACHINE_CONTROLLER: Controller[Context] = Controller(
    kinds.NETBOX_VIRTUAL_MACHINE.resource,
    IDENTITY.finalizer,
    done_after(vm_serving.serve),
    done_after(vm_serving.release),
)


def context(memo: kopf.Memo, reads: Reads) -> Context:
    return Context.from_memo(memo, reads=reads)


start_engines = watching.register([DEVICE_CONTROLLER, MACHINE_CONTROLLER], context)
