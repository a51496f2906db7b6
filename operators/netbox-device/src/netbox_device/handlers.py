"""kopf handlers of the netbox-device operator: decorators and typed arguments only, logic lives elsewhere.

NetboxDevice objects claim a free device (device_claims); NetboxVirtualMachine objects register a VM
(vm_serving). Every change runs the same level-triggered reconcile; watch events rebuild a wiped status
from NetBox; deletion releases what the object holds in NetBox.
"""

from __future__ import annotations

from typing import Any

import kopf

from capfleet import runtime
from capfleet.api import kinds
from netbox_device import device_claims, selection, vm_serving
from netbox_device.contexts import SHARED_KEY, Context, Shared

# The owner-instance annotation is a quiet mark on VM records only. On a NetboxDevice, the pass that
# follows its write re-reads the device the claim holds, which on NetBox before 4.6 (no If-Match) is what
# finds a claim another management cluster took over after the read-back (test_two_management_clusters:
# with that mark left out, a lost claim stayed Claimed). A VM record is nobody else's to take, and that
# pass only re-read it: three NetBox reads and a kopf record per VM.
IDENTITY = runtime.Identity(
    "netbox-device",
    quiet_marks_by_kind={kinds.NETBOX_VIRTUAL_MACHINE.kind: (selection.OWNER_INSTANCE,)},
)
DEVICES = kinds.NETBOX_DEVICE.resource.watch
MACHINES = kinds.NETBOX_VIRTUAL_MACHINE.resource.watch
runtime.count_phases(kinds.NETBOX_DEVICE.resource)
runtime.count_phases(kinds.NETBOX_VIRTUAL_MACHINE.resource)


@kopf.on.startup()
def create_shared(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo[SHARED_KEY] = Shared()


@kopf.on.resume(*DEVICES)
@kopf.on.create(*DEVICES)
@kopf.on.update(*DEVICES)
@runtime.reconciler("NetboxDevice")
async def claim_device(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await device_claims.serve(Context.from_memo(memo), body)


def handled_once(annotations: kopf.Annotations, **_: Any) -> bool:
    """Whether the reconcile has run to the end once: before that, it is the one to find or claim the
    device (register the VM), and a repair at every event of one in progress (each one a listing in
    NetBox) only loads NetBox (319 listings for 100 claims at once in make bench-fleet; two per new VM)."""
    return IDENTITY.handled_annotation in annotations


@kopf.on.event(*DEVICES, when=handled_once)
async def repair_device_status(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type in {"ADDED", "MODIFIED"}:
        await device_claims.repair(Context.from_memo(memo), body)


@kopf.on.delete(*DEVICES)
@runtime.reconciler("NetboxDevice")
@runtime.releases_at_once(IDENTITY)
async def release_device(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await device_claims.release(Context.from_memo(memo), body)


@kopf.on.resume(*MACHINES)
@kopf.on.create(*MACHINES)
@kopf.on.update(*MACHINES)
@runtime.reconciler("NetboxVirtualMachine")
async def register_machine(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vm_serving.serve(Context.from_memo(memo), body)


@kopf.on.event(*MACHINES, when=handled_once)
async def repair_machine_status(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type in {"ADDED", "MODIFIED"}:
        await vm_serving.repair(Context.from_memo(memo), body)


@kopf.on.delete(*MACHINES)
@runtime.reconciler("NetboxVirtualMachine")
@runtime.releases_at_once(IDENTITY)
async def deregister_machine(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vm_serving.release(Context.from_memo(memo), body)
