"""Folding children into the HybridMachine's step conditions, addresses and provider ID.

A machine is stuck where its first unfinished child is stuck, so each step's condition carries that
child's own reason and message, prefixed with the child's kind and name. `kubectl describe
hybridmachine` then says, for example, "LibvirtVM cp-0: Scheduled: no Hypervisor has 4 vCPUs free"
without anyone opening the child.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from capfleet import conditions
from capfleet.api.base import Condition
from capfleet.api.capi import IPAddress, IPAddressClaim
from capfleet.conditions import READY, Update
from capi_machine_glue.specs import Allocation

# The steps of a machine, in the order they happen; Ready names the first that is not True.
CLUSTER_INFRASTRUCTURE = "ClusterInfrastructureReady"
CONTROL_PLANE = "ControlPlaneInitialized"
BOOTSTRAP = "BootstrapDataReady"
ADDRESSES = "AddressesAllocated"
DEVICE = "DeviceClaimed"
SERVER = "ServerProvisioned"
VM = "VMProvisioned"
NETBOX_RECORD = "NetboxRecorded"

WAITING_STEPS = [CLUSTER_INFRASTRUCTURE, CONTROL_PLANE, BOOTSTRAP]
VM_STEPS = [*WAITING_STEPS, ADDRESSES, VM]
VM_STEPS_WITH_NETBOX = [*VM_STEPS, NETBOX_RECORD]
METAL_STEPS = [*WAITING_STEPS, ADDRESSES, DEVICE, SERVER]


def steps(vm: bool, netbox_record: bool) -> list[str]:
    if not vm:
        return METAL_STEPS
    return VM_STEPS_WITH_NETBOX if netbox_record else VM_STEPS


def child_ready(step: str, kind: str, child: Mapping[str, Any] | None, done_reason: str) -> Update:
    """The step's condition from one child's Ready condition."""
    if child is None:
        return Update.unknown(step, "Creating", f"{kind} not created yet")
    name = child["metadata"]["name"]
    if child["metadata"].get("deletionTimestamp"):
        return Update.false(step, "Deleting", f"{kind} {name} is being deleted")
    ready = conditions.find(conditions.parse((child.get("status") or {}).get("conditions")), READY)
    if ready is None:
        return Update.unknown(step, "Pending", f"{kind} {name} has not reported yet")
    if ready.status == "True":
        return Update.true(step, done_reason, f"{kind} {name}")
    message = f"{kind} {name}: {ready.message}" if ready.message else f"{kind} {name}"
    return Update(step, ready.status, ready.reason, message)


REPORT_GRACE_SECONDS = 20.0
"""How long a child just created may go without reporting before the machine's status says it waits for
that child. Saying at once that it has not reported cost a HybridMachine status write per child, and a
Cluster API Machine reconcile after each. The wait ends with the child's report, whose event wakes the
machine, or with the retry when the grace is over. The grace covers the children that report promptly
even when a whole fleet is created at once (IPAddressClaims, BaremetalInstances); those queued behind
NetBox or one hypervisor take longer, and are shown as not reported once it is over."""


def blocking_step(
    current: Sequence[Condition], updates: Iterable[Update], steps: Sequence[str]
) -> str | None:
    """The first step that is not True once `updates` apply to `current`: the one Ready names."""
    found = conditions.apply_all(current, updates, generation=None)
    for step in steps:
        if not conditions.is_true(found, step):
            return step
    return None


def report_grace_left(children: Iterable[Mapping[str, Any]], now: datetime) -> float:
    """Seconds until the youngest child that has not reported yet (no Ready condition) is
    REPORT_GRACE_SECONDS old; 0 when every child has reported or is older."""
    left = 0.0
    for child in children:
        created = child["metadata"].get("creationTimestamp")
        reported = conditions.find(conditions.parse((child.get("status") or {}).get("conditions")), READY)
        if created and reported is None:
            age = (now - conditions.instant(created)).total_seconds()
            left = max(left, REPORT_GRACE_SECONDS - age)
    return left


def address_name(claim: Mapping[str, Any]) -> str | None:
    """The IPAddress an IPAddressClaim is bound to, once it is."""
    ref = IPAddressClaim.parse(claim).status.address_ref
    return ref.name if ref is not None and ref.name else None


def claims_ready(claims: Sequence[tuple[str, Mapping[str, Any] | None]]) -> Update:
    """AddressesAllocated from every IPAddressClaim (name, object or None); True with no claims (DHCP)."""
    if not claims:
        return Update.true(ADDRESSES, "NoPools", "addresses come from DHCP")
    for name, claim in claims:
        if claim is None:
            return Update.unknown(ADDRESSES, "Creating", f"IPAddressClaim {name} not created yet")
        update = child_ready(ADDRESSES, "IPAddressClaim", claim, "Allocated")
        if update.status != "True":
            return update
        if address_name(claim) is None:
            return Update.unknown(ADDRESSES, "Pending", f"IPAddressClaim {name} has no address yet")
    return Update.true(ADDRESSES, "Allocated", f"{len(claims)} address(es) allocated")


def allocation(ip_address: IPAddress) -> Allocation:
    spec = ip_address.spec
    return Allocation(address=spec.address, prefix=spec.prefix, gateway=spec.gateway)


def machine_addresses(hostname: str, allocations: Iterable[Allocation]) -> list[dict[str, str]]:
    """status.addresses as CAPI reads them: the hostname, then each allocated address as InternalIP."""
    result = [{"type": "Hostname", "address": hostname}]
    result += [{"type": "InternalIP", "address": a.address} for a in allocations]
    return result
