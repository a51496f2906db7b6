"""Reconciling a Hypervisor: reach it over SSH, report versions, capacity and what capfleet VMs use of it.

Called by the Hypervisor handlers on every change and on a timer (the timer notices a host that went away
or came back). A host that cannot be reached, or whose host key does not match known_hosts, gets
Reachable=False with a reason saying which; the handler does not raise for that, because the timer
retries anyway and a refused host key needs a person, not a storm of reconnects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from capfleet import conditions, errors
from capfleet.api import kinds
from capfleet.api.libvirt import Capacity, Hypervisor
from capfleet.conditions import Update
from libvirt_vm import placements, placing
from libvirt_vm.backends import hosts
from libvirt_vm.contexts import HYPERVISORS, VMS, Context, ssh_target
from libvirt_vm.settings import LibvirtSettings

REACHABLE = "Reachable"
STEPS = [REACHABLE]
IN_USE = "InUse"


def placed_vms(ctx: Context) -> list[tuple[str, placing.Demand]]:
    """Every LibvirtVM placed on some hypervisor, with what it asks for."""
    return placements.on_hypervisors(ctx.shared.placements.all())


def capacity_fields(found: hosts.HostFacts, used: placing.Demand) -> dict[str, Any]:
    return {
        "libvirtVersion": found.libvirt_version,
        "qemuVersion": found.qemu_version,
        "capacity": {"vcpus": found.vcpus, "memoryMiB": found.memory_mib, "storageGiB": found.storage_gib},
        "allocated": {"vcpus": used.vcpus, "memoryMiB": used.memory_mib, "storageGiB": used.storage_gib},
    }


def users_of(name: str, vm_bodies: list[dict[str, Any]]) -> list[str]:
    """`namespace/name` of every LibvirtVM placed on Hypervisor `name`."""
    placed = (kinds.LIBVIRT_VM.parse(b) for b in vm_bodies)
    return sorted(
        f"{vm.metadata['namespace']}/{vm.metadata['name']}"
        for vm in placed
        if vm.spec.hypervisor_name == name
    )


async def guard_deletion(ctx: Context, body: Mapping[str, Any]) -> None:
    """Let a Hypervisor go only once no LibvirtVM is placed on it (their deletion needs it, or their
    `detached` annotation); until then Ready=False InUse names them, and the deletion waits."""
    users = users_of(body["metadata"]["name"], await ctx.kube.list(VMS))
    if not users:
        return
    shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
    message = f"{len(users)} LibvirtVM(s) are placed on it ({shown}); it is deleted once they are gone"
    await ctx.write_status(HYPERVISORS, body, {}, [Update.false(conditions.READY, IN_USE, message)], None)
    raise errors.Waiting(message, reason=IN_USE)


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    if body["metadata"].get("deletionTimestamp"):
        return  # being deleted: `guard_deletion` keeps its status
    # A status cache with one condition and no Paused (Hypervisors are not CAPI objects): written with
    # the kit's write_status rather than a Recorder, whose step() would raise where this must not.
    hypervisor = kinds.HYPERVISOR.parse(body)
    name = body["metadata"]["name"]
    try:
        target = await ssh_target(ctx.kube, hypervisor)
        pool_name = hypervisor.spec.storage_pool
        found, domains = await ctx.pool.run(
            name, target, lambda conn: (hosts.facts(conn, pool_name), hosts.domain_states(conn))
        )
    except errors.CapfleetError as exc:
        unreachable = Update.false(REACHABLE, exc.reason, exc.message)
        await ctx.write_status(HYPERVISORS, body, {}, [unreachable], STEPS)
        return
    if domains is not None:
        ctx.shared.listings.store(name, domains)
    used = placing.used_by(placed_vms(ctx), name)
    update = Update.true(REACHABLE, "Connected", f"libvirt {found.libvirt_version} over SSH")
    await ctx.write_status(HYPERVISORS, body, capacity_fields(found, used), [update], STEPS)


def candidate(hypervisor: Hypervisor, settings: LibvirtSettings) -> placing.Candidate:
    """The hypervisor as placement sees it: capacity (overcommitted as configured) less what it keeps
    for itself."""
    status, reserved = hypervisor.status, hypervisor.spec.reserved
    measured = status.capacity if status is not None else None
    capacity = measured or Capacity()
    conditions = status.conditions if status is not None else []
    reachable = any(c.type == REACHABLE and c.status == "True" for c in conditions)
    return placing.Candidate(
        name=hypervisor.metadata["name"],
        labels=hypervisor.metadata.get("labels") or {},
        failure_domain=hypervisor.spec.failure_domain,
        ready=reachable and measured is not None,
        vcpus=int(capacity.vcpus * settings.vcpu_overcommit) - reserved.vcpus,
        memory_mib=capacity.memory_mib - reserved.memory_mib,
        storage_gib=int(capacity.storage_gib * settings.storage_overcommit),
        base_images=tuple(hypervisor.spec.base_images),
        networks=networks_of(hypervisor),
    )


def networks_of(hypervisor: Hypervisor) -> tuple[placing.Attachment, ...]:
    """What the hypervisor lets VMs attach to, and which namespaces' VMs."""
    return tuple(
        dataclasses.replace(
            placing.attachment(n.bridge, n.network, n.user_mode), namespaces=frozenset(n.namespaces)
        )
        for n in hypervisor.spec.networks
    )
