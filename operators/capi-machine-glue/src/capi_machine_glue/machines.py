"""Reconciling a HybridMachine: wait as the CAPI contract says, create the children, fold them back.

Every reconcile starts from scratch: it reads the Machine, the Cluster, the HybridCluster and each child
by its deterministic name (from the watch cache when a change woke it), creates what is missing, and
writes a status computed only from those objects. So the same code provisions a machine, converges after
a crash and rebuilds a status lost in a clusterctl move. Children are created in this order: address
claims; then a LibvirtVM (and a
NetboxVirtualMachine) once the addresses are known, or a NetboxDevice and, once a server is claimed, a
BaremetalInstance. The glue never updates a child's spec after creating it: CAPI replaces machines, it
does not change them. Deletion is in `deletions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import pydantic

from capfleet import conditions, errors, ownership, pausing, reconciling
from capfleet.api import capi, kinds
from capfleet.api.base import Model
from capfleet.api.capi import IPAddress
from capfleet.api.hybrid_clusters import HybridCluster, HybridClusterSpec
from capfleet.api.hybrid_machines import HybridMachine, HybridMachineSpec
from capfleet.api.libvirt import LibvirtVMStatus
from capfleet.api.netbox import NetboxDeviceStatus
from capfleet.conditions import Update
from capfleet.controller import engine
from capfleet.controller.caches import Reads
from capfleet.resources import Resource
from capi_machine_glue import gates, inheritance, names, specs, summaries
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
    Context,
)

Obj = Mapping[str, Any]
T = TypeVar("T")


OWNER_GRACE_SECONDS = 10.0
"""How long a new HybridMachine waits for its Machine's ownerReference before its status says it waits:
Cluster API sets it within a second of creating the two, and saying so at once cost a status write per
machine. The wait ends with the event of the ownerReference, or with the retry after this time."""


class AwaitingReport(engine.TimedWait):
    """Not written to status: the step the machine is at waits for a child just created, which has not
    reported yet (`summaries.REPORT_GRACE_SECONDS`). The retry comes once that grace is over, and reads
    from the watch cache (reading from the API server would cost the glue more requests per machine)."""

    def __init__(self, message: str, *, seconds_left: float) -> None:
        super().__init__(message, reason="AwaitingReport")
        self.seconds_left = seconds_left

    def delay(self, retry: int) -> float | None:
        return self.seconds_left + 0.5


def seconds_since(stamp: str | None) -> float:
    """Seconds since an object's timestamp (0 without one: as if it were now)."""
    if not stamp:
        return 0.0
    return (datetime.now(UTC) - conditions.instant(stamp)).total_seconds()


async def capi_cluster(reads: Reads, name: str | None, namespace: str) -> capi.Cluster | None:
    found = await reads.get(CLUSTERS, name, namespace) if name else None
    return capi.Cluster.parse(found) if found is not None else None


async def _owned(reads: Reads, resource: Resource, name: str, namespace: str, owner: Obj) -> Obj | None:
    """The child of that name, None if absent; a same-named object owned by someone else is refused."""
    found = await reads.get(resource, name, namespace)
    if found is not None and not ownership.is_owned_by(found, owner):
        raise errors.Conflict(
            f"a {resource.kind} named {name} exists and is not owned by this HybridMachine",
            reason="ChildNameTaken",
        )
    return found


@dataclass
class Family:
    """A HybridMachine's children as found by name (None: not created yet)."""

    claims: dict[str, Obj | None]
    vm: Obj | None = None
    netbox_vm: Obj | None = None
    device: Obj | None = None
    instance: Obj | None = None

    def of_step(self, step: str) -> list[Obj]:
        """The children whose reports make up `step`'s condition."""
        by_step: dict[str, list[Obj | None]] = {
            summaries.ADDRESSES: list(self.claims.values()),
            summaries.VM: [self.vm],
            summaries.NETBOX_RECORD: [self.netbox_vm],
            summaries.DEVICE: [self.device],
            summaries.SERVER: [self.instance],
        }
        return [c for c in by_step.get(step, []) if c is not None]

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


async def family(reads: Reads, body: Obj, spec: HybridMachineSpec) -> Family:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    claims = {n: await _owned(reads, CLAIMS, n, namespace, body) for n in claim_names(spec, name)}
    found = Family(claims)
    if spec.vm is not None:
        found.vm = await _owned(reads, LIBVIRT_VMS, name, namespace, body)
        found.netbox_vm = await _owned(reads, NETBOX_VMS, name, namespace, body)
    else:
        found.device = await _owned(reads, NETBOX_DEVICES, name, namespace, body)
        found.instance = await _owned(reads, INSTANCES, name, namespace, body)
    return found


@dataclass(frozen=True)
class MachineReconcile:
    """One reconcile of a HybridMachine: how it reads, the object (as its children's owner, and parsed), its
    children as found, and the recorder every step writes its condition to."""

    ctx: Context
    reads: Reads
    body: Obj
    machine: HybridMachine
    children: Family
    recorder: reconciling.Recorder

    @property
    def spec(self) -> HybridMachineSpec:
        return self.machine.spec

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    async def ensure(self, resource: Resource, name: str, spec: Model) -> Obj:
        """The child `name` with `spec`, owned by the machine: created, or found as an earlier attempt
        made it."""
        child = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": ownership.child_metadata(name, self.body),
            "spec": spec.to_wire(),
        }
        found, _ = await self.ctx.kube.create_or_get(resource, child, self.namespace)
        return found

    def planned(self, step: str, plan: Callable[[], T]) -> T:
        """`plan()`'s result; a bad spec it finds is recorded as the step's condition, then raised. A child
        spec its model refuses (a value no CRD would accept) is a bad spec too, not a crash."""
        try:
            return plan()
        except pydantic.ValidationError as exc:
            refused = errors.InvalidSpec(
                f"the {step} child would be invalid: {exc}", reason="InvalidChildSpec"
            )
            self.recorder.note(Update.false(step, refused.reason, refused.message))
            raise refused from exc
        except errors.CapfleetError as exc:
            self.recorder.note(Update.false(step, exc.reason, exc.message))
            raise

    def blocked(self) -> bool:
        """Whether one of CAPI's waits is not over."""
        updates = self.recorder.updates
        return any(u.status != "True" for u in updates if u.type in summaries.WAITING_STEPS)

    def done(self, step: str) -> bool:
        return any(u.type == step and u.status == "True" for u in self.recorder.updates)

    def awaiting_report(self) -> None:
        """Raise AwaitingReport, so that nothing is written, while the step the machine is at waits only
        for a child that has just been created and has not reported yet."""
        if self.recorder.steps is None:
            return
        current = conditions.parse((self.recorder.body.get("status") or {}).get("conditions"))
        step = summaries.blocking_step(current, self.recorder.updates, self.recorder.steps)
        if step is None:
            return
        left = summaries.report_grace_left(self.children.of_step(step), datetime.now(UTC))
        if left > 0:
            raise AwaitingReport(f"{step}: waiting for a new child's first report", seconds_left=left)


async def reconcile(ctx: Context, body: Obj) -> None:
    if pausing.moving(body["metadata"]):
        return
    machine = kinds.HYBRID_MACHINE.parse(body)
    meta = body["metadata"]
    namespace, reads = meta["namespace"], ctx.reads
    owner = gates.capi_owner(meta, MACHINES)
    cluster_name = ownership.cluster_name(meta)
    recorder = reconciling.Recorder(
        ctx, HYBRID_MACHINES, body, summaries.steps(machine.spec.vm is not None, netbox_record=False)
    )
    if owner is None or cluster_name is None:
        if seconds_since(meta.get("creationTimestamp")) < OWNER_GRACE_SECONDS:
            raise engine.TimedWait("no CAPI Machine owns this HybridMachine yet", reason="WaitingForMachine")
        recorder.note(
            Update.false(
                summaries.CLUSTER_INFRASTRUCTURE,
                "WaitingForMachine",
                "no CAPI Machine owns this HybridMachine yet",
            )
        )
        await recorder.finish()
        return
    cluster = await capi_cluster(reads, cluster_name, namespace)
    children = await family(reads, body, machine.spec)
    paused = pausing.annotated(meta) or pausing.cluster_paused(cluster)
    await inheritance.mirror(ctx, children.existing(), body, paused=paused)
    if paused:
        await reconciling.Recorder(ctx, HYBRID_MACHINES, body, None).paused()
        return
    run = MachineReconcile(ctx, reads, body, machine, children, recorder)
    try:
        await converge(run, cluster_name, cluster, owner)
    except errors.CapfleetError as exc:
        await recorder.finish()
        await ctx.refused(body, exc)
        raise
    run.awaiting_report()
    await recorder.finish()


async def converge(
    run: MachineReconcile, cluster_name: str, cluster: capi.Cluster | None, owner: str
) -> None:
    """Pass CAPI's waits, then create what is missing; each step's condition goes to the recorder."""
    recorder = run.recorder
    hybrid_cluster_name = gates.infrastructure_ref(cluster) if cluster else None
    hybrid_cluster = await _hybrid_cluster(run.reads, hybrid_cluster_name, run.namespace)
    found = await run.reads.get(MACHINES, owner, run.namespace)
    capi_machine = capi.Machine.parse(found) if found is not None else None
    recorder.note(gates.cluster_infrastructure(cluster_name, cluster, hybrid_cluster))
    if capi_machine is None or cluster is None or hybrid_cluster is None:
        return
    recorder.note(gates.control_plane_initialized(capi_machine, cluster), gates.bootstrap_data(capi_machine))
    facts = specs.MachineFacts(
        namespace=run.namespace,
        name=run.name,
        cluster=cluster_name,
        data_secret=gates.data_secret_name(capi_machine) or "",
        failure_domain=gates.failure_domain(capi_machine) or run.spec.failure_domain,
        group=gates.machine_group(capi_machine),
        joined=gates.node_joined(capi_machine),
    )
    if facts.failure_domain:
        recorder.fields["failureDomain"] = facts.failure_domain
    if not run.blocked():
        await provision(run, facts, hybrid_cluster.spec)


async def _hybrid_cluster(reads: Reads, name: str | None, namespace: str) -> HybridCluster | None:
    found = await reads.get(HYBRID_CLUSTERS, name, namespace) if name else None
    return kinds.HYBRID_CLUSTER.parse(found) if found is not None else None


async def provision(run: MachineReconcile, facts: specs.MachineFacts, cluster: HybridClusterSpec) -> None:
    """Addresses, then the VM or the server; the provider ID, addresses and `provisioned` they give."""
    spec, recorder = run.spec, run.recorder
    allocations = await addresses(run, facts)
    if spec.vm is not None:
        provider_id = await vm(run, facts, cluster, allocations)
        # Only now: a VM step that fails reports against the steps the reconcile started with.
        recorder.steps = summaries.steps(True, specs.records_vms(cluster))
        infrastructure_step = summaries.VM
    else:
        provider_id = await metal(run, facts, cluster, allocations)
        infrastructure_step = summaries.SERVER
    if provider_id and spec.provider_id is None:
        patched = await run.ctx.kube.patch(
            HYBRID_MACHINES, run.name, {"spec": {"providerID": provider_id}}, run.namespace
        )
        if patched is not None:
            # The patch moved the generation on: this pass's conditions observe it, so the next pass has
            # nothing to rewrite.
            recorder.body = patched
    if allocations is not None:
        flat = [a for group in allocations.values() for a in group]
        recorder.fields["addresses"] = summaries.machine_addresses(
            specs.hostname(run.name, cluster.domain), flat
        )
    status = run.machine.status
    already = bool(status and status.initialization and status.initialization.provisioned)
    if already or (run.done(infrastructure_step) and (provider_id or spec.provider_id)):
        recorder.fields["initialization"] = {"provisioned": True}


async def addresses(
    run: MachineReconcile, facts: specs.MachineFacts
) -> dict[str, list[specs.Allocation]] | None:
    """Claim an address per pool and interface; the allocations by interface once all are bound."""
    plans = specs.address_claims(run.spec, facts)
    found: list[tuple[str, Obj | None]] = []
    for plan in plans:
        claim = run.children.claims.get(plan.name)
        if claim is None:
            claim = await run.ensure(CLAIMS, plan.name, plan.spec)
            run.children.claims[plan.name] = claim
        found.append((plan.name, claim))
    update = summaries.claims_ready(found)
    if update.status != "True":
        run.recorder.note(update)
        return None
    allocations: dict[str, list[specs.Allocation]] = {}
    for plan, (_, claim) in zip(plans, found, strict=True):
        address_name = summaries.address_name(claim) if claim is not None else None
        address = await run.reads.get(ADDRESSES, address_name, facts.namespace) if address_name else None
        if address is None:
            run.recorder.note(
                Update.unknown(
                    summaries.ADDRESSES, "Pending", f"IPAddress {address_name} of claim {plan.name} not found"
                )
            )
            return None
        parsed = summaries.allocation(IPAddress.parse(address))
        allocations.setdefault(plan.interface, []).append(parsed)
    run.recorder.note(update)
    return allocations


async def vm(
    run: MachineReconcile,
    facts: specs.MachineFacts,
    cluster: HybridClusterSpec,
    allocations: specs.Allocations | None,
) -> str | None:
    """The LibvirtVM (and NetBox record) once the addresses are known; the VM's provider ID."""
    children, recorder = run.children, run.recorder
    if allocations is None:
        recorder.note(Update.unknown(summaries.VM, "WaitingForAddresses", "waiting for addresses"))
        return None
    vm_spec = run.planned(summaries.VM, lambda: specs.vm_spec(run.spec, cluster, facts, allocations))
    if children.vm is None:
        children.vm = await run.ensure(LIBVIRT_VMS, facts.name, vm_spec)
    if facts.joined and not kinds.LIBVIRT_VM.parse(children.vm).spec.cloud_init.remove_user_data:
        # The Node joined: the join token (for a control plane, the CA keys) leaves the hypervisor.
        removed = {"spec": {"cloudInit": {"removeUserData": True}}}
        children.vm = await run.ctx.kube.patch(LIBVIRT_VMS, facts.name, removed, run.namespace) or children.vm
    recorder.note(summaries.child_ready(summaries.VM, "LibvirtVM", children.vm, "Running"))
    record = specs.netbox_vm_spec(run.spec, cluster, facts, allocations)
    if record is not None:
        if children.netbox_vm is None:
            children.netbox_vm = await run.ensure(NETBOX_VMS, facts.name, record)
        recorder.note(
            summaries.child_ready(
                summaries.NETBOX_RECORD, "NetboxVirtualMachine", children.netbox_vm, "Recorded"
            )
        )
    libvirt_vm = kinds.LIBVIRT_VM.parse(children.vm)
    vm_status = libvirt_vm.status or LibvirtVMStatus()
    hypervisor = vm_status.hypervisor_name or libvirt_vm.spec.hypervisor_name
    if hypervisor:
        recorder.fields["hypervisorName"] = hypervisor
    return vm_status.provider_id or None


async def claimed_device(
    run: MachineReconcile, facts: specs.MachineFacts, cluster: HybridClusterSpec
) -> tuple[NetboxDeviceStatus, bool]:
    """The NetboxDevice (created if missing) as it reports its server, and whether a server is claimed."""
    children = run.children
    if children.device is None:
        device_spec = run.planned(summaries.DEVICE, lambda: specs.device_spec(run.spec, cluster, facts))
        children.device = await run.ensure(NETBOX_DEVICES, facts.name, device_spec)
    update = summaries.child_ready(summaries.DEVICE, "NetboxDevice", children.device, "Claimed")
    run.recorder.note(update)
    device = kinds.NETBOX_DEVICE.parse(children.device).status or NetboxDeviceStatus()
    if device.device_id is not None:
        run.recorder.fields["deviceID"] = device.device_id
    return device, device.device_id is not None and update.status == "True"


async def metal(
    run: MachineReconcile,
    facts: specs.MachineFacts,
    cluster: HybridClusterSpec,
    allocations: specs.Allocations | None,
) -> str | None:
    """The device claim, then the BaremetalInstance once a server is claimed; the server's provider ID."""
    children, recorder = run.children, run.recorder
    device, claimed = await claimed_device(run, facts, cluster)
    if children.instance is None:
        if not claimed or device.device_id is None:
            recorder.note(Update.unknown(summaries.SERVER, "WaitingForDevice", "waiting for a server"))
            return None
        if allocations is None:
            recorder.note(Update.unknown(summaries.SERVER, "WaitingForAddresses", "waiting for addresses"))
            return names.metal_provider_id(device.device_id)
        instance_spec = run.planned(
            summaries.SERVER, lambda: specs.instance_spec(run.spec, cluster, facts, device, allocations)
        )
        children.instance = await run.ensure(INSTANCES, facts.name, instance_spec)
    recorder.note(
        summaries.child_ready(summaries.SERVER, "BaremetalInstance", children.instance, "Provisioned")
    )
    return kinds.BAREMETAL_INSTANCE.parse(children.instance).spec.provider_id or None
