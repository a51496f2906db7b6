"""Reconciling a LibvirtVM: place it, make its disks and seed, define and start its domain; delete it.

Each step is idempotent and finds what an earlier attempt made by deterministic name, so the same code
creates a VM, converges it after a failure and rebuilds a lost status. Each step has a condition
(Scheduled, DisksReady, SeedReady, Defined, Running) and Ready names the first one that is not True.
A failing step writes its condition with the error's reason and message, then raises for kopf to retry
with the error's backoff. Placement is written to `spec.hypervisorName` before anything is created.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from capfleet import errors, pausing
from capfleet.api import kinds
from capfleet.api.libvirt import Hypervisor, LibvirtVM
from capfleet.conditions import Update
from capfleet.sshlibvirt import SSHTarget
from libvirt_vm import domains, hypervisors, names, placing, seeding
from libvirt_vm.backends import hosts
from libvirt_vm.contexts import HYPERVISORS, SETTINGS, VMS, Context, secret_value, ssh_target, write_status

SCHEDULED, DISKS, SEED, DEFINED, RUNNING = "Scheduled", "DisksReady", "SeedReady", "Defined", "Running"
STEPS = [SCHEDULED, DISKS, SEED, DEFINED, RUNNING]
MOVE_ANNOTATION = "clusterctl.cluster.x-k8s.io/delete-for-move"
T = TypeVar("T")


async def place(ctx: Context, vm: LibvirtVM, namespace: str, name: str) -> str:
    """The hypervisor chosen for the VM, written to its spec; Waiting when none fits."""
    async with ctx.placement_lock:
        current = await ctx.kube.get(VMS, name, namespace)
        if current is not None and (current.get("spec") or {}).get("hypervisorName"):
            return str(current["spec"]["hypervisorName"])
        candidates = [
            hypervisors.candidate(
                kinds.HYPERVISOR.parse(h), h["metadata"]["name"], h["metadata"].get("labels") or {}
            )
            for h in await ctx.kube.list(HYPERVISORS)
            if not h["metadata"].get("deletionTimestamp")
        ]
        request = placing.Request(
            hypervisors.demand_of(vm), vm.spec.hypervisor_selector.match_labels, vm.spec.failure_domain
        )
        decision = placing.place(request, candidates, await hypervisors.placed_vms(ctx))
        if decision.hypervisor is None:
            raise errors.Waiting(decision.message, reason=decision.reason)
        await ctx.kube.patch(VMS, name, {"spec": {"hypervisorName": decision.hypervisor}}, namespace)
        return decision.hypervisor


class Run:
    """One reconcile's progress: the conditions found so far, written on success and on failure."""

    def __init__(self, ctx: Context, body: Mapping[str, Any]) -> None:
        self.ctx, self.body = ctx, body
        self.updates: list[Update] = [pausing.condition(False)]
        self.fields: dict[str, Any] = {}

    async def step(self, condition: str, work: Awaitable[T], reason: str, message: str = "") -> T:
        try:
            result = await work
        except errors.CapfleetError as exc:
            self.updates.append(Update.false(condition, exc.reason, exc.message))
            await write_status(self.ctx, self.body, self.fields, self.updates, STEPS)
            raise
        self.updates.append(Update.true(condition, reason, message))
        return result

    async def finish(self) -> None:
        await write_status(self.ctx, self.body, self.fields, self.updates, STEPS)


async def hypervisor_target(ctx: Context, hv_name: str) -> tuple[Hypervisor, SSHTarget]:
    body = await ctx.kube.get(HYPERVISORS, hv_name)
    if body is None:
        raise errors.DependencyMissing(f"Hypervisor {hv_name} not found", reason="HypervisorMissing")
    hypervisor = kinds.HYPERVISOR.parse(body)
    return hypervisor, await ssh_target(ctx.kube, hypervisor)


async def seed_data(ctx: Context, vm: LibvirtVM, namespace: str, name: str, provider_id: str) -> bytes:
    cloud_init = vm.spec.cloud_init
    ref = cloud_init.user_data_secret_ref
    user_data = await secret_value(ctx.kube, namespace, ref.name, ref.key)
    meta = seeding.meta_data(
        names.domain_uuid(namespace, name), cloud_init.hostname or name, provider_id, cloud_init.meta_data
    )
    network = seeding.network_config(vm.spec.interfaces)
    return seeding.cidata_iso(seeding.seed_files(user_data, meta, network))


def define_owned(conn: Any, plan: domains.DomainPlan) -> hosts.DomainInfo:
    """The VM's domain, defined if missing; a domain of that name owned by another object is refused."""
    found = hosts.find_domain(conn, plan.name)
    if found is None:
        return hosts.define(conn, domains.domain_xml(plan))
    if domains.parse_owner(found.xml) != plan.owner:
        raise errors.BackendRejected(
            f"a domain named {plan.name} exists and is not owned by this LibvirtVM", reason="DomainNameTaken"
        )
    return found


def power(conn: Any, name: str, on: bool) -> hosts.DomainInfo:
    hosts.set_power(conn, name, on)
    found = hosts.find_domain(conn, name)
    assert found is not None
    return found


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if meta.get("deletionTimestamp"):
        return
    if pausing.hands_off(meta):
        await write_status(ctx, body, {}, [pausing.condition(True)], STEPS)
        return
    async with ctx.vm_lock(namespace, name):
        await converge(ctx, body, namespace, name)


async def converge(ctx: Context, body: Mapping[str, Any], namespace: str, name: str) -> None:
    vm = kinds.LIBVIRT_VM.parse(body)
    run = Run(ctx, body)
    hv_name = await run.step(
        SCHEDULED, _placed(ctx, vm, namespace, name), "Placed", "placed on its Hypervisor"
    )
    if vm.spec.hypervisor_name is None:
        # Placing changed the spec: report against the new generation.
        run.body = await ctx.kube.get(VMS, name, namespace) or body
    domain = names.domain_name(namespace, name)
    provider_id = vm.spec.cloud_init.provider_id or names.provider_id(hv_name, domain)
    run.fields.update({"hypervisorName": hv_name, "domainName": domain, "providerID": provider_id})
    hypervisor, target = await run.step(DISKS, hypervisor_target(ctx, hv_name), "Pending")
    pool_name = hypervisor.spec.storage_pool

    def on_host(call: Callable[[Any], T]) -> Awaitable[T]:
        return ctx.pool.run(hv_name, target, call)

    disk_paths: list[str] = []
    for disk in vm.spec.disks:
        volume = names.disk_volume(domain, disk.name)
        path = await run.step(
            DISKS,
            on_host(
                functools.partial(
                    hosts.ensure_disk,
                    pool_name=pool_name,
                    name=volume,
                    size_gib=disk.size_gib,
                    source=disk.source_image,
                    strategy=disk.clone_strategy,
                )
            ),
            "Created",
            f"{len(vm.spec.disks)} disk volume(s) in pool {pool_name}",
        )
        disk_paths.append(path)
    iso = await run.step(SEED, seed_data(ctx, vm, namespace, name, provider_id), "Built")
    seed_path = await run.step(
        SEED,
        on_host(lambda c: hosts.ensure_seed(c, pool_name, names.seed_volume(domain), iso)),
        "Uploaded",
        "NoCloud cidata volume uploaded",
    )
    found_facts = await run.step(DEFINED, on_host(lambda c: hosts.facts(c, pool_name)), "Pending")
    plan = domains.DomainPlan(
        name=domain,
        uuid=names.domain_uuid(namespace, name),
        owner=domains.Owner(namespace, name),
        vcpus=vm.spec.vcpus,
        memory_mib=vm.spec.memory_mib,
        disks=tuple(domains.DiskDevice(p) for p in disk_paths),
        seed_path=seed_path,
        interfaces=tuple(vm.spec.interfaces),
        virt_type=domain_type(found_facts.kvm),
    )
    info = await run.step(DEFINED, on_host(lambda c: define_owned(c, plan)), "Defined", f"domain {domain}")
    run.fields["domainUUID"] = info.uuid
    on = vm.spec.power_state == "On"
    info = await run.step(RUNNING, on_host(lambda c: power(c, domain, on)), "Started" if on else "Stopped")
    run.fields["state"] = info.state
    if on != info.active:
        run.updates.append(Update.false(RUNNING, "Converging", f"domain is {info.state}"))
    elif not on:
        run.updates.append(Update.true(RUNNING, "PoweredOff", "powered off as the spec asks"))
    await run.finish()


def domain_type(kvm_offered: bool) -> str:
    configured = str(SETTINGS.domain_type)
    if configured in {"kvm", "qemu"}:
        return configured
    return "kvm" if kvm_offered else "qemu"


async def _placed(ctx: Context, vm: LibvirtVM, namespace: str, name: str) -> str:
    return vm.spec.hypervisor_name or await place(ctx, vm, namespace, name)


async def delete(ctx: Context, body: Mapping[str, Any]) -> None:
    """Destroy the domain and remove its volumes; nothing for a VM being moved or never placed."""
    meta = body["metadata"]
    if MOVE_ANNOTATION in (meta.get("annotations") or {}):
        return
    vm = kinds.LIBVIRT_VM.parse(body)
    hv_name = vm.spec.hypervisor_name
    if hv_name is None:
        return
    namespace, name = meta["namespace"], meta["name"]
    domain = names.domain_name(namespace, name)
    async with ctx.vm_lock(namespace, name):
        hypervisor, target = await hypervisor_target(ctx, hv_name)
        pool_name = hypervisor.spec.storage_pool
        await ctx.pool.run(
            hv_name, target, lambda c: hosts.remove(c, domain, pool_name, names.volume_prefix(domain))
        )
    ctx.vm_locks.pop(f"{namespace}/{name}", None)
