"""Registering one NetboxVirtualMachine in NetBox, keeping it in step, and deregistering it.

The VM record carries the owner custom field, so it is found again after a lost status or a move. IPs
named in the spec are linked when NetBox already has them (e.g. allocated by a NetboxIPPool) and created
otherwise; created ones carry the owner custom field and a marker in their description. On deletion the
linked ones are unassigned first, because deleting a VM deletes every IP assigned to its interfaces.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    found = await nb.list(VMS, **{f"cf_{OWNER_FIELD}": owner})
    owned = [vm for vm in found if (vm.get("custom_fields") or {}).get(OWNER_FIELD) == owner]
    return min(owned, key=lambda vm: int(vm["id"])) if owned else None


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


async def register(nb: Machines, spec: NetboxVirtualMachineSpec, owner: str) -> int:
    """Create or update the VM, its interfaces, MACs and IPs; returns the VM's NetBox id."""
    vm_id = await upsert_vm(nb, records.vm_fields(spec, owner, await resolve(nb, spec)), owner)
    wanted = {i.name: i for i in spec.interfaces}
    existing = {str(i["name"]): i for i in await nb.list(INTERFACES, virtual_machine_id=vm_id)}
    placed = await place_interfaces(nb, vm_id, wanted, existing, owner)
    v4, v6 = records.primaries(list(wanted.values()))
    primary = {"primary_ip4": placed.get(v4) if v4 else None, "primary_ip6": placed.get(v6) if v6 else None}
    vm_now = (await nb.list(VMS, id=vm_id))[0]
    if records.changes(vm_now, primary):
        await nb.update(VMS, vm_id, primary)
    await drop_stale_ips(nb, vm_id, set(placed.values()), owner)
    for name, stale in existing.items():
        if name not in wanted:
            await nb.delete(INTERFACES, int(stale["id"]))
    return vm_id


async def upsert_vm(nb: Machines, desired: Mapping[str, Any], owner: str) -> int:
    """The id of the VM this owner holds, created or brought in step with `desired`."""
    vm = await held(nb, owner)
    if vm is None:
        vm = await nb.create(VMS, desired)
    else:
        changed = records.changes(vm, desired)
        if changed:
            await nb.update(VMS, int(vm["id"]), changed)
    return int(vm["id"])


async def place_interfaces(
    nb: Machines,
    vm_id: int,
    wanted: Mapping[str, VirtualMachineInterface],
    existing: Mapping[str, Record],
    owner: str,
) -> dict[str, int]:
    """Every wanted interface with its MAC and addresses; returns the NetBox id of each address."""
    placed: dict[str, int] = {}
    for name, interface in wanted.items():
        current = existing.get(name) or await nb.create(INTERFACES, {"virtual_machine": vm_id, "name": name})
        await set_mac(nb, current, interface.mac_address)
        for address in interface.addresses:
            placed[address] = await place_ip(nb, int(current["id"]), address, owner)
    return placed


async def set_mac(nb: Machines, interface: Record, mac: str | None) -> None:
    if not mac or records.mac_of(interface) == mac.upper():
        return
    pk = int(interface["id"])
    found = [
        m for m in await nb.list(MACS, vminterface_id=pk) if str(m["mac_address"]).upper() == mac.upper()
    ]
    mac_object = found[0] if found else await nb.create(MACS, {"mac_address": mac, **records.assignment(pk)})
    await nb.update(INTERFACES, pk, {"primary_mac_address": int(mac_object["id"])})


async def place_ip(nb: Machines, interface_id: int, address: str, owner: str) -> int:
    """The id of `address` on the interface: already there, linked from NetBox, or created."""
    found = [
        ip
        for ip in await nb.list(IPS, address=records.host(address))
        if records.same_address(ip["address"], address)
    ]
    for ip in found:
        if (
            ip.get("assigned_object_type") == records.VMINTERFACE
            and ip.get("assigned_object_id") == interface_id
        ):
            return int(ip["id"])
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


async def drop_stale_ips(nb: Machines, vm_id: int, keep: set[int], owner: str) -> None:
    """IPs on the VM's interfaces the spec no longer names: created ones deleted, linked ones unassigned."""
    for ip in await nb.list(IPS, virtual_machine_id=vm_id):
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
    await drop_stale_ips(nb, vm_id, set(), owner)
    await nb.delete(VMS, vm_id)
