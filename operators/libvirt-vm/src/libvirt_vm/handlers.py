"""kopf handlers of the libvirt-vm operator: decorators and typed arguments only, logic lives elsewhere.

Hypervisors (cluster-scoped) are reconciled on every change and on a timer that notices a host going
away or coming back and lists its domains (`hypervisors`); one is deleted only once no LibvirtVM is placed
on it. LibvirtVMs are reconciled on every change and on a timer that rebuilds a lost status and
re-converges after a failure or a domain changed behind the operator's back (`vms`), in full only when
the VM's status and its hypervisor's last listing disagree (`rechecks`); deletion removes the domain and
its volumes. An index of the placed VMs, kept from the watch, is what placement and the counts read
(`placements`). VMQuotas have no change handlers (nor finalizers): events of quotas and VMs refresh their
counted status (`vmquotas`). The connection pool and the locks are created at startup in the
operator-wide memo. The two timers' intervals are settings, so they are registered by `register_polls`
once the settings are read.
"""

from __future__ import annotations

from typing import Any

import kopf

from capfleet import reconciling, runtime
from libvirt_vm import hypervisors, placements, vmquotas, vms
from libvirt_vm.backends.connections import Pool
from libvirt_vm.contexts import HYPERVISORS, SHARED_KEY, VMS, Context, Shared
from libvirt_vm.settings import LibvirtSettings

# What a VM's first pass writes on it and then carries on from (its placement, the mark that it touched
# the hypervisor and under which instance) wakes no second pass, which re-checked the VM over SSH and
# cost a kopf record (a patch of the LibvirtVM). hypervisorName is immutable once set, so the only
# change to it is that first pass's.
IDENTITY = runtime.Identity(
    "libvirt-vm",
    quiet_marks=(vms.TOUCHED, vms.OWNER_INSTANCE),
    quiet_fields=(("spec", "hypervisorName"),),
)
runtime.count_phases(VMS)
runtime.count_phases(HYPERVISORS)


@kopf.index(*VMS.watch)
async def placed_vms(body: kopf.Body, **_: Any) -> dict[str, placements.PlacedVM]:
    found = placements.placed_vm(body)
    return {found.hypervisor: found} if found is not None else {}


@kopf.on.startup()
def create_shared(memo: kopf.Memo, **kwargs: Any) -> None:
    settings = reconciling.from_memo(memo, reconciling.SETTINGS_KEY, LibvirtSettings)
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it. kopf passes
    # its indexes by name; its startup handler type does not declare them.
    memo[SHARED_KEY] = Shared(
        pool=Pool(timeout=settings.call_timeout_seconds),
        placements=placements.Placements(kwargs["placed_vms"]),
    )


@kopf.on.cleanup()
async def close_connections(memo: kopf.Memo, **_: Any) -> None:
    shared = memo.get(SHARED_KEY)
    if isinstance(shared, Shared):
        await shared.pool.close()


@kopf.on.resume(*HYPERVISORS.watch)
@kopf.on.create(*HYPERVISORS.watch)
@kopf.on.update(*HYPERVISORS.watch)
@runtime.reconciler("Hypervisor")
async def reconcile_hypervisor(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await hypervisors.reconcile(Context.from_memo(memo), body)


@runtime.reconciler("Hypervisor")
async def recheck_hypervisor(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await hypervisors.reconcile(Context.from_memo(memo), body)


@kopf.on.delete(*HYPERVISORS.watch)
@runtime.reconciler("Hypervisor")
async def release_hypervisor(body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
    ctx = Context.from_memo(memo)
    await hypervisors.guard_deletion(ctx, body)
    ctx.shared.listings.forget(name)
    await ctx.pool.forget(name)


@kopf.on.resume(*VMS.watch)
@kopf.on.create(*VMS.watch)
@kopf.on.update(*VMS.watch)
@runtime.reconciler("LibvirtVM")
async def reconcile_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.reconcile(Context.from_memo(memo), body)


@runtime.reconciler("LibvirtVM")
async def recheck_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.recheck(Context.from_memo(memo), body)


@kopf.on.delete(*VMS.watch)
@runtime.reconciler("LibvirtVM")
@runtime.releases_at_once(IDENTITY)
async def delete_vm(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await vms.delete(Context.from_memo(memo), body)


@kopf.on.event(*vmquotas.QUOTAS.watch)
async def quota_changed(type: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    if type != "DELETED" and namespace:
        await vmquotas.refresh_soon(Context.from_memo(memo), namespace)


@kopf.on.event(*VMS.watch)
async def vm_changed(type: str, body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    ctx = Context.from_memo(memo)
    if type == "DELETED" and namespace:
        ctx.shared.placements.gone(namespace, body["metadata"]["name"])
    if namespace and vmquotas.changes_usage(ctx, type, body):
        await vmquotas.refresh_soon(ctx, namespace)


def register_polls(settings: LibvirtSettings) -> None:
    """The re-check timers, at the intervals the settings give (called once, before kopf starts)."""
    kopf.timer(*HYPERVISORS.watch, interval=settings.hypervisor_poll_seconds, initial_delay=1.0)(
        recheck_hypervisor
    )
    kopf.timer(*VMS.watch, interval=settings.vm_poll_seconds, initial_delay=settings.vm_poll_seconds)(
        recheck_vm
    )
