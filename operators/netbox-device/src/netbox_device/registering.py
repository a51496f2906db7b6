"""Registering one NetboxVirtualMachine in NetBox, keeping it in step, and deregistering it.

The VM record carries the owner custom field, so it is found again after a lost status or a move. IPs
named in the spec are linked when NetBox already has them (e.g. allocated by a NetboxIPPool) and created
otherwise; created ones carry the owner custom field and a marker in their description. On deletion the
linked ones are unassigned first, because deleting a VM deletes every IP assigned to its interfaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capfleet import errors
from capfleet.api.netbox import NetboxVirtualMachineSpec, VirtualMachineInterface
from netbox_device import vm_records as records
from netbox_device.backends.machines import Machines, Record
from netbox_device.selection import OWNER_FIELD

VMS, INTERFACES, IPS, MACS = (
    "virtualization/virtual-machines",
    "virtualization/interfaces",
    "ipam/ip-addresses",
    "dcim/mac-addresses",
)


async def held(nb: Machines, owner: str) -> Record | None:
    return await Holdings(nb).held(owner)


class Holdings:
    """The VM each owner holds, asked of NetBox once per pass: settling the owner (`Context.settled_owner`)
    and registering under it ask the same question, and the owners a new record may hold something under
    (`Context.possible_owners`) are asked in one listing."""

    def __init__(self, nb: Machines) -> None:
        self.nb = nb
        self._answers: dict[str, Record | None] = {}

    async def ask(self, owners: Sequence[str]) -> None:
        wanted = [owner for owner in dict.fromkeys(owners) if owner not in self._answers]
        if not wanted:
            return
        # NetBox ORs the repeated values of a text custom field's filter.
        found = await self.nb.list(VMS, **{f"cf_{OWNER_FIELD}": wanted if len(wanted) > 1 else wanted[0]})
        for owner in wanted:
            owned = [vm for vm in found if (vm.get("custom_fields") or {}).get(OWNER_FIELD) == owner]
            self._answers[owner] = min(owned, key=lambda vm: int(vm["id"])) if owned else None

    async def held(self, owner: str) -> Record | None:
        await self.ask([owner])
        return self._answers[owner]


async def resolve(nb: Machines, spec: NetboxVirtualMachineSpec) -> dict[str, int | None]:
    ids: dict[str, int | None] = {}
    ids["cluster"] = await nb.lookup("virtualization/clusters", name=spec.cluster) if spec.cluster else None
    for field, endpoint, slug in (
        ("role", "dcim/device-roles", spec.role),
        ("tenant", "tenancy/tenants", spec.tenant),
        ("site", "dcim/sites", spec.site),
    ):
        ids[field] = await nb.lookup(endpoint, slug=slug) if slug else None
    return ids


async def register(
    nb: Machines, spec: NetboxVirtualMachineSpec, owner: str, holdings: Holdings | None = None
) -> int:
    """Create or update the VM, its interfaces, MACs and IPs; returns the VM's NetBox id.

    A VM created in this call has nothing on it yet, so what would only confirm that (its interfaces, their
    MACs, its IPs) is not read: 8 requests for a new VM with one interface and address, instead of 12 (and
    the look-ups of cluster, role, tenant and site, once per client). A VM found (a later pass, or one after
    a crash halfway) is checked in full from three reads (the VM, its interfaces, its IPs) while nothing
    has to change, instead of five."""
    desired = records.vm_fields(spec, owner, await resolve(nb, spec))
    vm, created = await upsert_vm(nb, desired, owner, holdings or Holdings(nb))
    vm_id = int(vm["id"])
    wanted = {i.name: i for i in spec.interfaces}
    existing: dict[str, Record] = {}
    assigned: list[Record] = []
    if not created:
        existing = {str(i["name"]): i for i in await nb.list(INTERFACES, virtual_machine_id=vm_id)}
        assigned = await nb.list(IPS, virtual_machine_id=vm_id)
    placed = await place_interfaces(nb, vm_id, wanted, existing, assigned, owner)
    v4, v6 = records.primaries(list(wanted.values()))
    primary = {"primary_ip4": placed.get(v4) if v4 else None, "primary_ip6": placed.get(v6) if v6 else None}
    if records.changes(vm, primary):
        await nb.update(VMS, vm_id, primary)
    await drop_stale_ips(nb, assigned, set(placed.values()), owner)
    for name, stale in existing.items():
        if name not in wanted:
            await nb.delete(INTERFACES, int(stale["id"]))
    return vm_id


async def upsert_vm(
    nb: Machines, desired: Mapping[str, Any], owner: str, holdings: Holdings
) -> tuple[Record, bool]:
    """The VM this owner holds, brought in step with `desired`, or created (then True)."""
    vm = await holdings.held(owner)
    if vm is None:
        return await nb.create(VMS, desired), True
    changed = records.changes(vm, desired)
    if changed:
        await nb.update(VMS, int(vm["id"]), changed)
    return vm, False


async def place_interfaces(
    nb: Machines,
    vm_id: int,
    wanted: Mapping[str, VirtualMachineInterface],
    existing: Mapping[str, Record],
    assigned: list[Record],
    owner: str,
) -> dict[str, int]:
    """Every wanted interface with its MAC and addresses (`assigned`: the IPs the VM has now); returns the
    NetBox id of each address."""
    placed: dict[str, int] = {}
    for name, interface in wanted.items():
        current = existing.get(name)
        new = current is None
        if current is None:
            current = await nb.create(INTERFACES, {"virtual_machine": vm_id, "name": name})
        await set_mac(nb, current, interface.mac_address, new_interface=new)
        for address in interface.addresses:
            placed[address] = await place_ip(nb, int(current["id"]), address, owner, assigned)
    return placed


async def set_mac(nb: Machines, interface: Record, mac: str | None, new_interface: bool = False) -> None:
    """The interface's primary MAC: a MAC object of the interface's, found (unless the interface was just
    created, with none) or created."""
    if not mac or records.mac_of(interface) == mac.upper():
        return
    pk = int(interface["id"])
    listed = [] if new_interface else await nb.list(MACS, vminterface_id=pk)
    found = [m for m in listed if str(m["mac_address"]).upper() == mac.upper()]
    mac_object = found[0] if found else await nb.create(MACS, {"mac_address": mac, **records.assignment(pk)})
    await nb.update(INTERFACES, pk, {"primary_mac_address": int(mac_object["id"])})


def on_interface(ips: list[Record], interface_id: int, address: str) -> Record | None:
    """The IP among `ips` that is `address` and assigned to the VM interface, if any."""
    for ip in ips:
        if (
            records.same_address(ip["address"], address)
            and ip.get("assigned_object_type") == records.VMINTERFACE
            and ip.get("assigned_object_id") == interface_id
        ):
            return ip
    return None


async def place_ip(nb: Machines, interface_id: int, address: str, owner: str, assigned: list[Record]) -> int:
    """The id of `address` on the interface: already there (among the VM's `assigned` IPs, else looked
    up), linked from NetBox, or created."""
    there = on_interface(assigned, interface_id, address)
    if there is not None:
        return int(there["id"])
    found = [
        ip
        for ip in await nb.list(IPS, address=records.host(address))
        if records.same_address(ip["address"], address)
    ]
    there = on_interface(found, interface_id, address)
    if there is not None:
        return int(there["id"])
    free = [ip for ip in found if ip.get("assigned_object_id") is None]
    if free:
        await nb.update(IPS, int(free[0]["id"]), records.assignment(interface_id))
        return int(free[0]["id"])
    if found:
        raise errors.BackendRejected(
            f"NetBox IP {address} is assigned to another object", reason="AddressInUse"
        )
    created = await nb.create(
        IPS,
        {
            "address": address,
            "status": "active",
            "description": records.created_mark(owner),
            "custom_fields": {OWNER_FIELD: owner},
            **records.assignment(interface_id),
        },
    )
    return int(created["id"])


async def drop_stale_ips(nb: Machines, assigned: list[Record], keep: set[int], owner: str) -> None:
    """Of the VM's IPs (`assigned`), those the spec no longer names: created ones deleted, linked ones
    unassigned."""
    for ip in assigned:
        if int(ip["id"]) in keep:
            continue
        if ip.get("description") == records.created_mark(owner):
            await nb.delete(IPS, int(ip["id"]))
        else:
            await nb.update(IPS, int(ip["id"]), records.assignment(None))


async def deregister(nb: Machines, owner: str) -> None:
    """Delete the VM; linked IPs are unassigned first so they outlive it."""
    vm = await held(nb, owner)
    if vm is None:
        return
    vm_id = int(vm["id"])
    if vm.get("primary_ip4") or vm.get("primary_ip6"):
        await nb.update(VMS, vm_id, {"primary_ip4": None, "primary_ip6": None})
    await drop_stale_ips(nb, await nb.list(IPS, virtual_machine_id=vm_id), set(), owner)
    await nb.delete(VMS, vm_id)
