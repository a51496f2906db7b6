"""kopf handlers of the libvirt-vm operator: decorators and typed arguments only, logic lives elsewhere.

Hypervisors (cluster-scoped) are reconciled on every change and on a timer that notices a host going
away or coming back (`hypervisors`). LibvirtVMs are reconciled on every change and on a timer that
rebuilds a lost status and re-converges after a failure (`vms`); deletion removes the domain and its
volumes. The connection pool and the locks are created at startup in the operator-wide memo.
"""

from __future__ import annotations

from typing import Any

import kopf

from capfleet import runtime
from capfleet.api import kinds
from libvirt_vm import hypervisors, vms
from libvirt_vm.contexts import SETTINGS, Context, Shared

IDENTITY = runtime.Identity("libvirt-vm")
HYPERVISORS = (kinds.LIBVIRT_GROUP, kinds.VERSION, "hypervisors")
VMS = (kinds.LIBVIRT_GROUP, kinds.VERSION, "libvirtvms")


@kopf.on.startup()
def create_shared(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo["libvirt_shared"] = Shared()


@kopf.on.cleanup()
async def close_connections(memo: kopf.Memo, **_: Any) -> None:
    shared = memo.get("libvirt_shared")
    if isinstance(shared, Shared):
        await shared.pool.close()


def context(memo: kopf.Memo) -> Context:
    shared = memo.get("libvirt_shared")
    if not isinstance(shared, Shared):
        raise RuntimeError("libvirt-vm did not start: no connection pool in memo")
    return Context(runtime.kube(memo), runtime.recorder(memo), shared)


@kopf.on.resume(*HYPERVISORS)
@kopf.on.create(*HYPERVISORS)
@kopf.on.update(*HYPERVISORS)
@runtime.reconciler("Hypervisor")
async def reconcile_hypervisor(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await hypervisors.reconcile(context(memo), body)


@kopf.timer(*HYPERVISORS, interval=SETTINGS.hypervisor_poll_seconds, initial_delay=1.0)
@runtime.reconciler("Hypervisor")
async def recheck_hypervisor(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await hypervisors.reconcile(context(memo), body)


@kopf.on.delete(*HYPERVISORS, optional=True)
async def forget_hypervisor(name: str, memo: kopf.Memo, **_: Any) -> None:
    await context(memo).pool.forget(name)


@kopf.on.resume(*VMS)
@kopf.on.create(*VMS)
@kopf.on.update(*VMS)
@runtime.reconciler("LibvirtVM")
async def reconcile_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.reconcile(context(memo), body)


@kopf.timer(*VMS, interval=SETTINGS.vm_poll_seconds, initial_delay=SETTINGS.vm_poll_seconds)
@runtime.reconciler("LibvirtVM")
async def recheck_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.reconcile(context(memo), body)


@kopf.on.delete(*VMS)
@runtime.reconciler("LibvirtVM")
async def delete_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.delete(context(memo), body)
