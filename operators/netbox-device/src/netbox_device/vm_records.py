"""What a NetboxVirtualMachine's NetBox records should look like, and what differs: pure functions.

NetBox renders relations as nested objects, choices as `{value, label}` and vCPUs as decimals; the
comparisons here normalise both sides so an idle object never writes to NetBox.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from capfleet.api.netbox import NetboxVirtualMachineSpec, VirtualMachineInterface
from netbox_device.selection import OWNER_FIELD, value_of

VMINTERFACE = "virtualization.vminterface"
RELATIONS = ("cluster", "role", "tenant", "site", "primary_ip4", "primary_ip6")


def created_mark(owner: str) -> str:
    """The description of IPs this operator created (and so deletes); linked IPs never carry it."""
    return f"capfleet: {owner}"


def vm_fields(spec: NetboxVirtualMachineSpec, owner: str, ids: Mapping[str, int | None]) -> dict[str, Any]:
    """The VM as the spec wants it; `ids` resolves cluster, role, tenant and site to NetBox ids."""
    disk = spec.disk_gib
    return {
        "name": spec.name,
        "status": spec.status or "active",
        "cluster": ids.get("cluster"),
        "role": ids.get("role"),
        "tenant": ids.get("tenant"),
        "site": ids.get("site"),
        "vcpus": spec.vcpus,
        "memory": spec.memory_mib,
        "disk": disk * 1024 if disk else None,  # NetBox ≥ 4.1 counts disk in MB
        "description": spec.description or "",
        "custom_fields": {OWNER_FIELD: owner},
    }


def normalised(field: str, value: Any) -> Any:
    if field in RELATIONS:
        return value.get("id") if isinstance(value, Mapping) else value
    if field == "vcpus":
        return float(value) if value is not None else None
    if field == "custom_fields":
        return {k: v for k, v in (value or {}).items() if k == OWNER_FIELD}
    return value_of(value)


def changes(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `desired` whose value differs from NetBox's rendering in `current`."""
    return {
        key: value
        for key, value in desired.items()
        if normalised(key, current.get(key)) != normalised(key, value)
    }


def same_address(a: str, b: str) -> bool:
    return ipaddress.ip_interface(a) == ipaddress.ip_interface(b)


def host(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip)


def primaries(interfaces: Sequence[VirtualMachineInterface]) -> tuple[str | None, str | None]:
    """The spec's first IPv4 and first IPv6 address, in interface order."""
    v4 = v6 = None
    for interface in interfaces:
        for address in interface.addresses:
            version = ipaddress.ip_interface(address).version
            if version == 4 and v4 is None:
                v4 = address
            if version == 6 and v6 is None:
                v6 = address
    return v4, v6


def mac_of(interface: Mapping[str, Any]) -> str | None:
    """An interface's MAC in either of NetBox's MAC models, upper case."""
    primary = interface.get("primary_mac_address")
    if isinstance(primary, Mapping) and primary.get("mac_address"):
        return str(primary["mac_address"]).upper()
    return str(interface["mac_address"]).upper() if interface.get("mac_address") else None


def assignment(interface_id: int | None) -> dict[str, Any]:
    return {
        "assigned_object_type": VMINTERFACE if interface_id is not None else None,
        "assigned_object_id": interface_id,
    }
