"""A NetboxDevice's status, built only from what NetBox says about the claimed device: pure functions.

Status is a cache (clusterctl move drops it, a person may wipe it), so it is always rebuilt from the
device, its interfaces and their MACs. Both MAC models are read: NetBox ≥ 4.2 shows an interface's MAC as
`primary_mac_address` (and `mac_addresses`), older NetBox as the plain `mac_address` field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from netbox_device.selection import BMC_FIELD, slug_of


def address_without_mask(field: Any) -> str | None:
    address = field.get("address") if isinstance(field, Mapping) else field
    return str(address).split("/", 1)[0] if address else None


def bmc_address(device: Mapping[str, Any]) -> str | None:
    """The `bmc_address` custom field when set, else the device's out-of-band IP (without its mask)."""
    custom = (device.get("custom_fields") or {}).get(BMC_FIELD)
    if custom:
        return str(custom)
    return address_without_mask(device.get("oob_ip"))


def interface_mac(interface: Mapping[str, Any]) -> str | None:
    """An interface's MAC in either MAC model, in lower case as the CRDs (and Kubernetes tools) write MACs;
    NetBox stores and returns them in upper case."""
    primary = interface.get("primary_mac_address")
    if isinstance(primary, Mapping) and primary.get("mac_address"):
        return str(primary["mac_address"]).lower()
    if interface.get("mac_address"):
        return str(interface["mac_address"]).lower()
    assigned = interface.get("mac_addresses") or []
    first = assigned[0] if assigned and isinstance(assigned[0], Mapping) else None
    return str(first["mac_address"]).lower() if first and first.get("mac_address") else None


def interfaces_of(interfaces: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    for interface in sorted(interfaces, key=lambda i: str(i.get("name"))):
        entry: dict[str, Any] = {"name": str(interface["name"]), "mgmtOnly": bool(interface.get("mgmt_only"))}
        mac = interface_mac(interface)
        if mac:
            entry["macAddress"] = mac
        result.append(entry)
    return result


def device_fields(device: Mapping[str, Any], interfaces: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every status field but conditions; None values clear fields of an earlier device."""
    rack = device.get("rack")
    return {
        "deviceID": int(device["id"]),
        "name": device.get("name"),
        "serial": device.get("serial") or None,
        "site": slug_of(device.get("site")),
        "rack": rack.get("name") if isinstance(rack, Mapping) else None,
        "bmcAddress": bmc_address(device),
        "interfaces": interfaces_of(interfaces),
    }


EMPTY_DEVICE_FIELDS: dict[str, Any] = {
    "deviceID": None,
    "name": None,
    "serial": None,
    "site": None,
    "rack": None,
    "bmcAddress": None,
    "interfaces": None,
}
"""The status fields of a claim that holds no device (yet): cleared."""
