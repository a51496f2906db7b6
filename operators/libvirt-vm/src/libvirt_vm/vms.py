"""Reconciling a LibvirtVM: place it, make its disks and seed, define and start its domain; delete it.

Each step is idempotent and finds what an earlier attempt made by deterministic name, so the same code
creates a VM, converges it after a failure and rebuilds a lost status. Each step has a condition
(Scheduled, DisksReady, SeedReady, Defined, Running) and Ready names the first one that is not True.
A failing step writes its condition with the error's reason and message (`reconciling.Recorder`), then
raises for kopf to retry with the error's backoff. Placement is written to `spec.hypervisorName` before
anything is created.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from capfleet import cloudinit, conditions, errors, metrics, pausing, reconciling, secretholds
from capfleet.api import kinds
from capfleet.api.libvirt import USER_DATA_LABEL, Hypervisor, LibvirtVM, VMDisk
from capfleet.conditions import Update
from capfleet.kube import Obj
from capfleet.sshlibvirt import SSHTarget
from libvirt_vm import domains, hypervisors, names, placements, placing, rechecks, seeding, vmquotas
from libvirt_vm.backends import hosts
from libvirt_vm.contexts import HYPERVISORS, VMS, Context, read_secret, ssh_target, value_of

SCHEDULED, DISKS, SEED, DEFINED, RUNNING = "Scheduled", "DisksReady", "SeedReady", "Defined", "Running"
STEPS = [SCHEDULED, DISKS, SEED, DEFINED, RUNNING]
TOUCHED = "libvirt.capfleet.dev/hypervisor-touched"
"""Written before the first write to the VM's hypervisor: a VM without it (nor a step that succeeded there,
for VMs made before the mark) left nothing on any host, so its deletion needs no hypervisor."""
OWNER_INSTANCE = "libvirt.capfleet.dev/owner-instance"
"""Written with TOUCHED: the management cluster's instance name the VM's domain records as its owner's."""
DETACHED = "libvirt.capfleet.dev/detached"
"""Set by a person, as Metal3's `detached`: deletion leaves the hypervisor alone (the way out for a host
that is gone for good; whatever the VM had there stays there)."""
DELETION_FAILED = "DeletionFailed"
T = TypeVar("T")


@dataclass(frozen=True)
class Placed:
    """A VM on its hypervisor: how to reach the host, and the VM's names there."""

    ctx: Context
    owner: domains.Owner
    hypervisor: str
    target: SSHTarget
    pool_name: str
    domain: str
    base_images: tuple[str, ...] = ()
    networks: tuple[placing.Attachment, ...] = ()

    def run(self, call: Callable[[Any], T]) -> Awaitable[T]:
        """Run `call` with the hypervisor's pooled libvirt connection, in a worker thread."""
        return self.ctx.pool.run(self.hypervisor, self.target, call)


async def place(ctx: Context, vm: LibvirtVM, owner: domains.Owner) -> str:
    """The hypervisor chosen for the VM, written to its spec; Waiting when none fits, QuotaExceeded when
    the VM would cross a limit of its namespace's VMQuotas."""
    async with ctx.placement_lock:
        current = await ctx.kube.get(VMS, owner.name, owner.namespace)
        if current is not None:
            already = kinds.LIBVIRT_VM.parse(current).spec.hypervisor_name
            if already:
                return already
        demand = placements.demand_of(vm)
        placed = ctx.shared.placements.all()
        await vmquotas.admit(ctx, owner.namespace, demand, placed)
        candidates = [
            hypervisors.candidate(kinds.HYPERVISOR.parse(h), ctx.settings)
            for h in await ctx.kube.list(HYPERVISORS)
            if not h["metadata"].get("deletionTimestamp")
        ]
        selector, images = vm.spec.hypervisor_selector.match_labels, base_images_of(vm)
        wanted = attachments_of(vm)
        request = placing.Request(demand, selector, vm.spec.failure_domain, images, wanted, owner.namespace)
        decision = placing.place(request, candidates, placements.on_hypervisors(placed))
        if decision.hypervisor is None:
            raise errors.Waiting(decision.message, reason=decision.reason)
        patch = {"spec": {"hypervisorName": decision.hypervisor}}
        await ctx.kube.patch(VMS, owner.name, patch, owner.namespace)
        ctx.shared.placements.placing(
            placements.PlacedVM(owner.namespace, owner.name, decision.hypervisor, demand)
        )
        return decision.hypervisor


async def hypervisor_target(
    ctx: Context, hv_name: str, holder: secretholds.Holder
) -> tuple[Hypervisor, SSHTarget]:
    body = await ctx.kube.get(HYPERVISORS, hv_name)
    if body is None:
        raise errors.DependencyMissing(f"Hypervisor {hv_name} not found", reason="HypervisorMissing")
    hypervisor = kinds.HYPERVISOR.parse(body)
    return hypervisor, await ssh_target(ctx.kube, hypervisor, holder)


async def reach(ctx: Context, meta: Mapping[str, Any], hv_name: str) -> Placed:
    """The VM (`meta`, as just read) as placed on `hv_name`, with the SSH target of the hypervisor, whose
    Secrets the VM holds from then on."""
    owner = owner_of(meta)
    hypervisor, target = await hypervisor_target(ctx, hv_name, secretholds.Holder(VMS, meta))
    domain = names.domain_name(owner.namespace, owner.name)
    pool, images = hypervisor.spec.storage_pool, tuple(hypervisor.spec.base_images)
    return Placed(ctx, owner, hv_name, target, pool, domain, images, hypervisors.networks_of(hypervisor))


def attachments_of(vm: LibvirtVM) -> frozenset[placing.Attachment]:
    """What the VM's interfaces attach to."""
    return frozenset(placing.attachment(i.bridge, i.network, i.user_mode) for i in vm.spec.interfaces)


async def attachable(placed: Placed, vm: LibvirtVM) -> None:
    """Nothing, once the hypervisor offers every interface's attachment to the VM's namespace: a VM whose
    spec names its hypervisor was not placed by the rules, and an interface may be added later."""
    refused = placing.not_attachable(placed.networks, attachments_of(vm), placed.owner.namespace)
    if refused:
        message = (
            f"Hypervisor {placed.hypervisor} does not offer {', '.join(refused)} to namespace "
            f"{placed.owner.namespace}: an administrator lists what VMs may attach to in its spec.networks"
        )
        raise errors.DependencyMissing(message, reason=placing.NETWORK_NOT_OFFERED)


def base_images_of(vm: LibvirtVM) -> frozenset[str]:
    """The base image volumes the VM's disks clone."""
    return frozenset(d.source_image for d in vm.spec.disks if d.source_image)


def provider_id_of(vm: LibvirtVM, hv_name: str, domain: str) -> str:
    """The provider ID the spec gives, or capfleet's own from the hypervisor and domain name."""
    return vm.spec.cloud_init.provider_id or names.provider_id(hv_name, domain)


async def seed_data(placed: Placed, vm: LibvirtVM, user_data: bytes) -> bytes:
    """The cidata ISO: the bootstrap Secret's user-data (empty once `removeUserData`), meta-data and
    network-config."""
    cloud_init, owner = vm.spec.cloud_init, placed.owner
    meta = cloudinit.meta_data(
        names.domain_uuid(owner.namespace, owner.name),
        cloud_init.hostname or owner.name,
        provider_id_of(vm, placed.hypervisor, placed.domain),
        cloud_init.meta_data,
    )
    network = cloudinit.network_config(vm.spec.interfaces)
    return seeding.cidata_iso(seeding.seed_files(user_data, meta, network))


def owner_of(meta: Mapping[str, Any]) -> domains.Owner:
    """The owner the VM's domain records: its namespace, name and the instance name it was marked with."""
    instance = (meta.get("annotations") or {}).get(OWNER_INSTANCE) or None
    return domains.Owner(meta["namespace"], meta["name"], instance)


def owned_domain(conn: Any, name: str, owner: domains.Owner) -> hosts.DomainInfo | None:
    """The domain `name` if it is `owner`'s, None if there is none; one owned by another object (of this
    management cluster or another) is refused."""
    found = hosts.find_domain(conn, name)
    if found is not None and domains.parse_owner(found.xml) != owner:
        raise errors.BackendRejected(
            f"a domain named {name} exists and is not owned by this LibvirtVM", reason="DomainNameTaken"
        )
    return found


def define_owned(conn: Any, plan: domains.DomainPlan) -> hosts.DomainInfo:
    """The VM's domain, defined if missing; a domain of that name owned by another object is refused."""
    return owned_domain(conn, plan.name, plan.owner) or hosts.define(conn, domains.domain_xml(plan))


def remove_owned(conn: Any, name: str, pool_name: str, prefix: str, owner: domains.Owner) -> bool:
    """Destroy the VM's domain and its volumes, and say so; a domain of that name that is another's
    (another management cluster's VM of the same namespace and name) is left alone with the volumes of
    its name, which are its own, and the answer is False."""
    found = hosts.find_domain(conn, name)
    if found is not None and domains.parse_owner(found.xml) != owner:
        return False
    hosts.remove(conn, name, pool_name, prefix)
    return True


def power(conn: Any, name: str, on: bool) -> hosts.DomainInfo:
    hosts.set_power(conn, name, on)
    found = hosts.find_domain(conn, name)
    assert found is not None
    return found


async def recheck(ctx: Context, body: Mapping[str, Any]) -> None:
    """The timer's re-check: nothing while the VM is as its hypervisor last listed it, else a reconcile."""
    if as_last_listed(ctx, body):
        metrics.RECHECKS.labels(kind="LibvirtVM", outcome="as_listed").inc()
        return
    metrics.RECHECKS.labels(kind="LibvirtVM", outcome="converged").inc()
    await reconcile(ctx, body)


def as_last_listed(ctx: Context, body: Mapping[str, Any]) -> bool:
    """Whether the VM's re-check has nothing to do: its domain is as its status says in its hypervisor's
    listing of at most one VM poll interval ago (`rechecks`)."""
    vm = kinds.LIBVIRT_VM.parse(body)
    hypervisor = vm.status.hypervisor_name if vm.status is not None else None
    if not hypervisor or pausing.hands_off(body["metadata"]) or body["metadata"].get("deletionTimestamp"):
        return False
    listing = ctx.shared.listings.fresh(hypervisor, ctx.settings.vm_poll_seconds)
    return rechecks.as_listed(vm, body["metadata"].get("generation"), listing)


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return
    if pausing.hands_off(body["metadata"]):
        await reconciling.Recorder(ctx, VMS, body, STEPS).paused()
        return
    owner = domains.Owner(meta["namespace"], meta["name"])
    async with ctx.vm_lock(owner.namespace, owner.name):
        await converge(ctx, body, owner)


async def converge(ctx: Context, body: Mapping[str, Any], owner: domains.Owner) -> None:
    """Every step in order; the first that fails writes its condition and raises."""
    vm = kinds.LIBVIRT_VM.parse(body)
    run = reconciling.Recorder(ctx, VMS, body, STEPS)
    scheduled, user_data = await schedule(ctx, run, vm, owner)
    placed = await take_name(run, scheduled)
    disk_paths = await make_disks(run, placed, vm)
    seed_path = await make_seed(run, placed, vm, user_data)
    await define(run, placed, vm, tuple(domains.DiskDevice(p) for p in disk_paths), seed_path)
    await power_as_asked(run, placed, vm)
    await run.finish()


async def schedule(
    ctx: Context, run: reconciling.Recorder, vm: LibvirtVM, owner: domains.Owner
) -> tuple[Placed, bytes]:
    """Scheduled: the VM's hypervisor (placing it if the spec names none), then a way to reach it; with
    the seed's user-data, read before placing."""
    placing_vm = _placed(ctx, vm, owner)
    hv_name, user_data = await run.step(SCHEDULED, placing_vm, "Placed", "placed on its Hypervisor")
    if vm.spec.hypervisor_name is None:
        # Placing changed the spec: report against the new generation.
        run.body = await ctx.kube.get(VMS, owner.name, owner.namespace) or run.body
    domain = names.domain_name(owner.namespace, owner.name)
    provider_id = provider_id_of(vm, hv_name, domain)
    run.fields.update({"hypervisorName": hv_name, "domainName": domain, "providerID": provider_id})
    return await run.step(DISKS, reach(ctx, run.body["metadata"], hv_name), "Pending"), user_data


async def take_name(run: reconciling.Recorder, placed: Placed) -> Placed:
    """Before the first write to the hypervisor: the VM is marked (its deletion has work there, under this
    owner) and a domain of its name that is not its own is refused, before any volume is made for it."""
    instance = await mark_touched(placed.ctx, run.body)
    placed = dataclasses.replace(placed, owner=dataclasses.replace(placed.owner, instance=instance))
    await run.step(DISKS, placed.run(lambda c: owned_domain(c, placed.domain, placed.owner)), "Pending")
    return placed


def clone_of(disk: VMDisk, placed: Placed) -> hosts.Clone | None:
    if disk.source_image is None:
        return None
    offered = functools.partial(placing.offers, placed.base_images)
    return hosts.Clone(disk.source_image, disk.clone_strategy, offered)


async def make_disks(run: reconciling.Recorder, placed: Placed, vm: LibvirtVM) -> list[str]:
    """DisksReady: one volume per disk in the hypervisor's pool; their paths. A disk is cloned only from
    a base image its Hypervisor offers: checked where each volume is made, so a VM whose spec names its
    hypervisor, and a disk added later, are held to it, and volumes made before the list are left be."""
    paths: list[str] = []
    message = f"{len(vm.spec.disks)} disk volume(s) in pool {placed.pool_name}"
    for disk in vm.spec.disks:
        ensure = functools.partial(
            hosts.ensure_disk,
            pool_name=placed.pool_name,
            name=names.disk_volume(placed.domain, disk.name),
            size_gib=disk.size_gib,
            source=clone_of(disk, placed),
        )
        paths.append(await run.step(DISKS, placed.run(ensure), "Created", message))
    return paths


async def make_seed(run: reconciling.Recorder, placed: Placed, vm: LibvirtVM, user_data: bytes) -> str:
    """SeedReady: the NoCloud ISO built and uploaded as a volume; its path."""
    iso = await run.step(SEED, seed_data(placed, vm, user_data), "Built")
    volume = names.seed_volume(placed.domain)
    # Once per process and seed content, what is there is read back: an upload cut off by a kill left a
    # volume that exists but is no seed, and a changed seed (its user-data removed) must replace the old.
    checked = placed.ctx.shared.checked_seeds
    wanted = seeding.files_of(iso)
    key = f"{placed.hypervisor}/{volume}/{seeding.digest(wanted or {})}"
    current = None if key in checked else (lambda found: seeding.files_of(found) == wanted)
    upload = placed.run(lambda c: hosts.ensure_seed(c, placed.pool_name, volume, iso, current))
    path = await run.step(SEED, upload, "Uploaded", "NoCloud cidata volume uploaded")
    checked.add(key)
    return path


async def define(
    run: reconciling.Recorder,
    placed: Placed,
    vm: LibvirtVM,
    disks: tuple[domains.DiskDevice, ...],
    seed_path: str,
) -> None:
    """Defined: the domain defined (kvm or qemu as configured and offered) and owned by this VM, with
    only interfaces its hypervisor offers to the VM's namespace."""
    await run.step(DEFINED, attachable(placed, vm), "Pending")
    settings = placed.ctx.settings
    virt_type = settings.configured_virt_type
    if virt_type is None:  # "auto": the host's capabilities tell
        virt_type = settings.virt_type(await run.step(DEFINED, placed.run(hosts.kvm_offered), "Pending"))
    owner = placed.owner
    plan = domains.DomainPlan(
        name=placed.domain,
        uuid=names.domain_uuid(owner.namespace, owner.name),
        owner=owner,
        vcpus=vm.spec.vcpus,
        memory_mib=vm.spec.memory_mib,
        disks=disks,
        seed_path=seed_path,
        interfaces=tuple(vm.spec.interfaces),
        virt_type=virt_type,
    )
    defined = placed.run(lambda c: define_owned(c, plan))
    info = await run.step(DEFINED, defined, "Defined", f"domain {placed.domain}")
    run.fields["domainUUID"] = info.uuid


async def power_as_asked(run: reconciling.Recorder, placed: Placed, vm: LibvirtVM) -> None:
    """Running: the domain started or stopped as the spec's powerState asks."""
    on = vm.spec.power_state == "On"
    switched = placed.run(lambda c: power(c, placed.domain, on))
    info = await run.step(RUNNING, switched, "Started" if on else "Stopped")
    run.fields["state"] = info.state
    if on != info.active:
        run.note(Update.false(RUNNING, "Converging", f"domain is {info.state}"))
    elif not on:
        run.note(Update.true(RUNNING, "PoweredOff", "powered off as the spec asks"))


async def _placed(ctx: Context, vm: LibvirtVM, owner: domains.Owner) -> tuple[str, bytes]:
    """The VM's hypervisor and its seed's user-data, read first: a VM whose Secret is not meant for VMs (or
    lacks the key) is neither placed nor built on what it may not boot with. The user-data is read once per
    reconcile, and is empty once `removeUserData`."""
    user_data = b""
    if not vm.spec.cloud_init.remove_user_data:
        ref = vm.spec.cloud_init.user_data_secret_ref
        user_data = value_of(await user_data_secret(ctx, vm, owner.namespace), ref.key)
    return vm.spec.hypervisor_name or await place(ctx, vm, owner), user_data


async def user_data_secret(ctx: Context, vm: LibvirtVM, namespace: str) -> Obj:
    """The Secret `cloudInit.userDataSecretRef` names, if it is meant for VMs (`seeding.meant_for_vms`):
    libvirt-vm reads it with its own rights, so any other Secret of the namespace (the cluster's CA) is
    refused rather than copied into a seed its VM's user reads."""
    name = vm.spec.cloud_init.user_data_secret_ref.name
    secret = await read_secret(ctx.kube, namespace, name)
    if not seeding.meant_for_vms(secret):
        message = (
            f"Secret {namespace}/{name} is not meant for VMs: label it {USER_DATA_LABEL}=true, or name "
            "Cluster API's bootstrap data Secret"
        )
        raise errors.DependencyMissing(message, reason=seeding.USER_DATA_NOT_FOR_VMS)
    return secret


async def mark_touched(ctx: Context, body: Mapping[str, Any]) -> str | None:
    """Record, before the first write to the hypervisor, that the VM's deletion will have work there and
    the instance name its domain is owned under; return that name (None for VMs from before it was
    recorded, whose domains carry none)."""
    meta = body["metadata"]
    if TOUCHED in (meta.get("annotations") or {}):
        return owner_of(meta).instance
    instance = None if left_something(body) else await ctx.instance()
    patch = {"metadata": {"annotations": {TOUCHED: "true", OWNER_INSTANCE: instance}}}
    if await ctx.kube.patch(VMS, meta["name"], patch, meta["namespace"]) is None:
        raise errors.Waiting("the LibvirtVM was deleted")
    return instance


def left_something(body: Mapping[str, Any]) -> bool:
    """Whether the VM may have left anything on its hypervisor: the mark, or (VMs made before it) a step
    that succeeded there."""
    if TOUCHED in (body["metadata"].get("annotations") or {}):
        return True
    done = {
        c.get("type") for c in (body.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    }
    return bool(done & {DISKS, SEED, DEFINED, RUNNING})


async def delete(ctx: Context, body: Mapping[str, Any]) -> None:
    """Destroy the domain and remove its volumes; nothing for a VM being moved, detached, never placed or
    that left nothing on its hypervisor. A failure is written as Ready=False DeletionFailed, naming the
    way out. Last, the hypervisor's Secrets are let go of (a run after that only lets go again)."""
    holder = secretholds.Holder(VMS, body["metadata"])
    await secretholds.release(ctx.kube, holder, lambda: remove(ctx, body))


async def remove(ctx: Context, body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    if pausing.moving(meta) or DETACHED in (meta.get("annotations") or {}) or not left_something(body):
        return
    vm = kinds.LIBVIRT_VM.parse(body)
    if vm.spec.hypervisor_name is None:
        return
    owner = owner_of(meta)
    try:
        async with ctx.vm_lock(owner.namespace, owner.name):
            placed = await reach(ctx, meta, vm.spec.hypervisor_name)
            prefix = names.volume_prefix(placed.domain)
            removed = await placed.run(
                lambda c: remove_owned(c, placed.domain, placed.pool_name, prefix, owner)
            )
    except errors.CapfleetError as exc:
        message = (
            f"cannot remove the domain from Hypervisor {vm.spec.hypervisor_name}: {exc.message}; if that "
            f"host is gone for good, annotate the LibvirtVM {DETACHED}=true to delete it without the host"
        )
        failed = Update.false(conditions.READY, DELETION_FAILED, message)
        await ctx.write_status(VMS, body, {}, [failed], None)
        raise
    if not removed:
        message = f"domain {placed.domain} on {placed.hypervisor} is not this VM's: left alone"
        await ctx.recorder.transition(body, "Warning", "DomainNotOwned", message)
    ctx.vm_locks.pop(f"{owner.namespace}/{owner.name}", None)
