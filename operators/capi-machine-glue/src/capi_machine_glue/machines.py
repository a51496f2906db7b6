"""Reconciling a HybridMachine: wait as the CAPI contract says, create the children, fold them back.

Every reconcile starts from scratch: it reads the Machine, the Cluster, the HybridCluster and each child
by its deterministic name, creates what is missing, and writes a status computed only from those
objects. So the same code provisions a machine, converges after a crash and rebuilds a status lost in a
clusterctl move. Children are created in the order of DESIGN §2: address claims; then a LibvirtVM (and a
NetboxVirtualMachine) once the addresses are known, or a NetboxDevice and, once a server is claimed, a
BaremetalInstance. The glue never updates a child's spec after creating it: CAPI replaces machines, it
does not change them.

Deletion removes the machine (VM or server) first and the device claim and addresses only after it is
gone, so a server is never released while it still runs the old machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from capfleet import errors, kube, ownership, pausing
from capfleet.api import kinds
from capfleet.api.hybrid_clusters import HybridClusterSpec
from capfleet.api.hybrid_machines import HybridMachineSpec
from capfleet.api.netbox import NetboxDeviceStatus
from capfleet.conditions import Update
from capfleet.resources import Resource
from capi_machine_glue import gates, names, specs, summaries
from capi_machine_glue.contexts import (
    ADDRESSES,
    CLAIMS,
    CLUSTERS,
    HYBRID_CLUSTERS,
    HYBRID_MACHINES,
    INSTANCES,
    LIBVIRT_VMS,
    MACHINES,
    NETBOX_DEVICES,
    NETBOX_VMS,
    SETTINGS,
    Context,
    write_status,
)
from capi_machine_glue.wakeups import HYBRID_MACHINE, Key

MACHINE_KIND = "Machine"
CAPI_GROUP = "cluster.x-k8s.io"

Obj = Mapping[str, Any]
T = TypeVar("T")


class ChildrenRemaining(errors.Waiting):
    """Deletion waits for children that are still being removed by their operators."""

    default_reason = "DeletingChildren"
    retry_base = SETTINGS.deletion_poll_seconds
    retry_cap = 10.0


@dataclass
class Status:
    """One reconcile's findings: condition updates and status fields, written once at the end."""

    updates: list[Update] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    def planned(self, step: str, plan: Callable[[], T]) -> T:
        """`plan()`'s result; a bad spec it finds is recorded as the step's condition, then raised."""
        try:
            return plan()
        except errors.CapfleetError as exc:
            self.updates.append(Update.false(step, exc.reason, exc.message))
            raise

    def blocked(self) -> bool:
        return any(u.status != "True" for u in self.updates if u.type in summaries.WAITING_STEPS)


def machine_owner(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == MACHINE_KIND and str(ref.get("apiVersion", "")).startswith(CAPI_GROUP + "/"):
            return dict(ref)
    return None


def _child(
    api_version: str, kind: str, name: str, owner: Obj, spec: Mapping[str, Any], paused: bool
) -> dict[str, Any]:
    metadata = ownership.child_metadata(name, owner)
    if paused:
        metadata["annotations"] = {pausing.PAUSED_ANNOTATION: "true"}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": dict(spec)}


async def _owned(ctx: Context, resource: Resource, name: str, namespace: str, owner: Obj) -> Obj | None:
    """The child of that name, None if absent; a same-named object owned by someone else is refused."""
    found = await ctx.kube.get(resource, name, namespace)
    if found is not None and not ownership.is_owned_by(found, owner):
        raise errors.Conflict(
            f"a {resource.kind} named {name} exists and is not owned by this HybridMachine",
            reason="ChildNameTaken",
        )
    return found


async def _ensure(ctx: Context, resource: Resource, owner: Obj, name: str, spec: Mapping[str, Any]) -> Obj:
    body = _child(resource.api_version, resource.kind, name, owner, spec, paused=False)
    namespace = owner["metadata"]["namespace"]
    created, _ = await ctx.kube.create_or_get(resource, body, namespace)
    return created


async def _mirror_pause(ctx: Context, children: Sequence[tuple[Resource, Obj]], paused: bool) -> None:
    """Put the paused annotation on every child while paused, and take it off when not."""
    for resource, child in children:
        meta = child["metadata"]
        if pausing.annotated(meta) == paused or meta.get("deletionTimestamp"):
            continue
        value = "true" if paused else None
        patch = {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: value}}}
        await ctx.kube.patch(resource, meta["name"], patch, meta["namespace"])


@dataclass
class Family:
    """A HybridMachine's children as found by name (None: not created yet)."""

    claims: dict[str, Obj | None]
    vm: Obj | None = None
    netbox_vm: Obj | None = None
    device: Obj | None = None
    instance: Obj | None = None

    def existing(self) -> list[tuple[Resource, Obj]]:
        found: list[tuple[Resource, Obj | None]] = [(CLAIMS, c) for c in self.claims.values()]
        found += [
            (LIBVIRT_VMS, self.vm),
            (NETBOX_VMS, self.netbox_vm),
            (NETBOX_DEVICES, self.device),
            (INSTANCES, self.instance),
        ]
        return [(r, c) for r, c in found if c is not None]


def claim_names(spec: HybridMachineSpec, machine: str) -> list[str]:
    return [
        names.address_claim(machine, interface.name, index)
        for interface in spec.network.interfaces
        for index, _ in enumerate(interface.ip_pool_refs)
    ]


async def family(ctx: Context, body: Obj, spec: HybridMachineSpec) -> Family:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    claims = {n: await _owned(ctx, CLAIMS, n, namespace, body) for n in claim_names(spec, name)}
    found = Family(claims)
    if spec.vm is not None:
        found.vm = await _owned(ctx, LIBVIRT_VMS, name, namespace, body)
        found.netbox_vm = await _owned(ctx, NETBOX_VMS, name, namespace, body)
    else:
        found.device = await _owned(ctx, NETBOX_DEVICES, name, namespace, body)
        found.instance = await _owned(ctx, INSTANCES, name, namespace, body)
    return found


async def reconcile(ctx: Context, namespace: str, name: str) -> None:
    body = await ctx.kube.get(HYBRID_MACHINES, name, namespace)
    if body is None or body["metadata"].get("deletionTimestamp") or pausing.moving(body["metadata"]):
        return
    spec = kinds.HYBRID_MACHINE.parse(body).spec
    meta = body["metadata"]
    owner = machine_owner(meta)
    cluster_name = ownership.cluster_name(meta)
    steps = summaries.steps(spec.vm is not None, netbox_record=False)
    if owner is None or cluster_name is None:
        waiting = Update.false(
            summaries.CLUSTER_INFRASTRUCTURE,
            "WaitingForMachine",
            "no CAPI Machine owns this HybridMachine yet",
        )
        await write_status(ctx, HYBRID_MACHINES, body, {}, [pausing.condition(False), waiting], steps)
        return
    ctx.wakeups.belongs_to(Key(HYBRID_MACHINE, namespace, name), namespace, cluster_name)
    cluster = await ctx.kube.get(CLUSTERS, cluster_name, namespace)
    children = await family(ctx, body, spec)
    paused = pausing.annotated(meta) or pausing.cluster_paused(cluster)
    await _mirror_pause(ctx, children.existing(), paused)
    if paused:
        await write_status(ctx, HYBRID_MACHINES, body, {}, [pausing.condition(True)], None)
        return
    status = Status([pausing.condition(False)])
    try:
        steps = await converge(ctx, body, spec, cluster_name, cluster, owner, children, status)
    except errors.CapfleetError as exc:
        await write_status(ctx, HYBRID_MACHINES, body, status.fields, status.updates, steps)
        raise exc
    await write_status(ctx, HYBRID_MACHINES, body, status.fields, status.updates, steps)


async def converge(
    ctx: Context,
    body: Obj,
    spec: HybridMachineSpec,
    cluster_name: str,
    cluster: Obj | None,
    owner: Mapping[str, Any],
    children: Family,
    status: Status,
) -> list[str]:
    """Gather facts, create what is missing, record each step in `status`; return the Ready steps."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    steps = summaries.steps(spec.vm is not None, netbox_record=False)
    hybrid_cluster_name = gates.infrastructure_ref(cluster) if cluster else None
    hybrid_cluster = (
        await ctx.kube.get(HYBRID_CLUSTERS, hybrid_cluster_name, namespace) if hybrid_cluster_name else None
    )
    machine = await ctx.kube.get(MACHINES, owner["name"], namespace)
    status.updates.append(gates.cluster_infrastructure(cluster_name, cluster, hybrid_cluster))
    if machine is None or cluster is None or hybrid_cluster is None:
        return steps
    status.updates.append(gates.control_plane_initialized(machine, cluster))
    status.updates.append(gates.bootstrap_data(machine))
    facts = specs.MachineFacts(
        namespace=namespace,
        name=name,
        cluster=cluster_name,
        data_secret=gates.data_secret_name(machine) or "",
        failure_domain=gates.failure_domain(machine) or spec.failure_domain,
        group=gates.machine_group(machine),
    )
    if facts.failure_domain:
        status.fields["failureDomain"] = facts.failure_domain
    cluster_spec = kinds.HYBRID_CLUSTER.parse(hybrid_cluster).spec
    if status.blocked():
        return steps
    allocations = await addresses(ctx, body, spec, facts, children, status)
    provider_id: str | None
    if spec.vm is not None:
        steps = summaries.steps(True, specs.records_vms(cluster_spec))
        provider_id = await vm(ctx, body, spec, cluster_spec, facts, allocations, children, status)
        infrastructure_step = summaries.VM
    else:
        provider_id = await metal(ctx, body, spec, cluster_spec, facts, allocations, children, status)
        infrastructure_step = summaries.SERVER
    if provider_id and spec.provider_id is None:
        await ctx.kube.patch(HYBRID_MACHINES, name, {"spec": {"providerID": provider_id}}, namespace)
    if allocations is not None:
        flat = [a for group in allocations.values() for a in group]
        status.fields["addresses"] = summaries.machine_addresses(
            specs.hostname(name, cluster_spec.domain), flat
        )
    done = any(u.type == infrastructure_step and u.status == "True" for u in status.updates)
    already = bool(((body.get("status") or {}).get("initialization") or {}).get("provisioned"))
    if already or (done and (provider_id or spec.provider_id)):
        status.fields["initialization"] = {"provisioned": True}
    return steps


async def addresses(
    ctx: Context,
    body: Obj,
    spec: HybridMachineSpec,
    facts: specs.MachineFacts,
    children: Family,
    status: Status,
) -> dict[str, list[specs.Allocation]] | None:
    """Claim an address per pool and interface; the allocations by interface once all are bound."""
    plans = specs.address_claims(spec, facts)
    found: list[tuple[str, Obj | None]] = []
    for plan in plans:
        claim = children.claims.get(plan.name)
        if claim is None:
            claim = await _ensure(ctx, CLAIMS, body, plan.name, plan.spec)
            children.claims[plan.name] = claim
        found.append((plan.name, claim))
    update = summaries.claims_ready(found)
    status.updates.append(update)
    if update.status != "True":
        return None
    allocations: dict[str, list[specs.Allocation]] = {}
    for plan, (_, claim) in zip(plans, found, strict=True):
        assert claim is not None
        address_name = claim["status"]["addressRef"]["name"]
        address = await ctx.kube.get(ADDRESSES, address_name, facts.namespace)
        if address is None:
            status.updates[-1] = Update.unknown(
                summaries.ADDRESSES, "Pending", f"IPAddress {address_name} of claim {plan.name} not found"
            )
            return None
        allocations.setdefault(plan.interface, []).append(summaries.allocation(address))
    return allocations


async def vm(
    ctx: Context,
    body: Obj,
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: specs.MachineFacts,
    allocations: dict[str, list[specs.Allocation]] | None,
    children: Family,
    status: Status,
) -> str | None:
    """The LibvirtVM (and NetBox record) once the addresses are known; the VM's provider ID."""
    if allocations is None:
        status.updates.append(Update.unknown(summaries.VM, "WaitingForAddresses", "waiting for addresses"))
        return None
    vm_spec = status.planned(summaries.VM, lambda: specs.vm_spec(spec, cluster, facts, allocations))
    if children.vm is None:
        children.vm = await _ensure(ctx, LIBVIRT_VMS, body, facts.name, vm_spec)
    status.updates.append(summaries.child_ready(summaries.VM, "LibvirtVM", children.vm, "Running"))
    record = specs.netbox_vm_spec(spec, cluster, facts, allocations)
    if record is not None:
        if children.netbox_vm is None:
            children.netbox_vm = await _ensure(ctx, NETBOX_VMS, body, facts.name, record)
        status.updates.append(
            summaries.child_ready(
                summaries.NETBOX_RECORD, "NetboxVirtualMachine", children.netbox_vm, "Recorded"
            )
        )
    vm_status = children.vm.get("status") or {}
    hypervisor = vm_status.get("hypervisorName") or (children.vm.get("spec") or {}).get("hypervisorName")
    if hypervisor:
        status.fields["hypervisorName"] = hypervisor
    provider_id = vm_status.get("providerID")
    return str(provider_id) if provider_id else None


async def metal(
    ctx: Context,
    body: Obj,
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: specs.MachineFacts,
    allocations: dict[str, list[specs.Allocation]] | None,
    children: Family,
    status: Status,
) -> str | None:
    """The device claim, then the BaremetalInstance once a server is claimed; the server's provider ID."""
    if children.device is None:
        device_spec = status.planned(summaries.DEVICE, lambda: specs.device_spec(spec, cluster, facts))
        children.device = await _ensure(ctx, NETBOX_DEVICES, body, facts.name, device_spec)
    device_update = summaries.child_ready(summaries.DEVICE, "NetboxDevice", children.device, "Claimed")
    status.updates.append(device_update)
    device = NetboxDeviceStatus.model_validate(children.device.get("status") or {})
    claimed = device.device_id is not None and device_update.status == "True"
    if device.device_id is not None:
        status.fields["deviceID"] = device.device_id
    if children.instance is None:
        if not claimed:
            status.updates.append(
                Update.unknown(summaries.SERVER, "WaitingForDevice", "waiting for a server")
            )
            return None
        if allocations is None:
            status.updates.append(
                Update.unknown(summaries.SERVER, "WaitingForAddresses", "waiting for addresses")
            )
            return names.metal_provider_id(device.device_id) if device.device_id is not None else None
        instance_spec = status.planned(
            summaries.SERVER, lambda: specs.instance_spec(spec, cluster, facts, device, allocations)
        )
        children.instance = await _ensure(ctx, INSTANCES, body, facts.name, instance_spec)
    status.updates.append(
        summaries.child_ready(summaries.SERVER, "BaremetalInstance", children.instance, "Provisioned")
    )
    provider_id = (children.instance.get("spec") or {}).get("providerID")
    return str(provider_id) if provider_id else None


async def _delete_owned(ctx: Context, body: Obj, targets: Sequence[tuple[Resource, str]]) -> list[str]:
    """Request deletion of each existing child; the ones still present (being deleted or just asked)."""
    namespace = body["metadata"]["namespace"]
    remaining = []
    for resource, name in targets:
        child = await ctx.kube.get(resource, name, namespace)
        if child is None or not ownership.is_owned_by(child, body):
            continue
        if not child["metadata"].get("deletionTimestamp"):
            try:
                await ctx.kube.delete(resource, name, namespace)
            except kube.KubeError as exc:
                raise errors.BackendUnavailable(f"deleting {resource.kind} {name}: {exc}") from exc
        remaining.append(f"{resource.kind} {name}")
    return remaining


async def delete(ctx: Context, body: Obj) -> None:
    """Delete the children, machine first, and wait until their operators have released everything."""
    meta = body["metadata"]
    if pausing.moving(meta):
        return
    namespace, name = meta["namespace"], meta["name"]
    spec = kinds.HYBRID_MACHINE.parse(body).spec
    cluster_name = ownership.cluster_name(meta)
    cluster = await ctx.kube.get(CLUSTERS, cluster_name, namespace) if cluster_name else None
    if pausing.annotated(meta) or pausing.cluster_paused(cluster):
        await write_status(ctx, HYBRID_MACHINES, body, {}, [pausing.condition(True)], None)
        raise ChildrenRemaining("reconciliation is paused; deletion resumes when unpaused", reason="Paused")
    machine_first: list[tuple[Resource, str]] = [(INSTANCES, name), (LIBVIRT_VMS, name), (NETBOX_VMS, name)]
    then: list[tuple[Resource, str]] = [(NETBOX_DEVICES, name)] + [
        (CLAIMS, n) for n in claim_names(spec, name)
    ]
    remaining = await _delete_owned(ctx, body, machine_first)
    if not remaining:
        remaining = await _delete_owned(ctx, body, then)
    if remaining:
        message = "waiting for " + ", ".join(remaining) + " to be deleted"
        deleting = Update.false("Ready", "Deleting", message)
        await write_status(ctx, HYBRID_MACHINES, body, {}, [deleting], None)
        raise ChildrenRemaining(message)
