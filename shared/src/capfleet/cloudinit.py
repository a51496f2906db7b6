"""The NoCloud seed every capfleet machine boots with, rendered by one set of rules for VMs and servers.

One HybridMachine network must give the same guest wherever the machine lands: libvirt-vm and
baremetal-provision both render meta-data and network-config here. The rules:

- meta-data is YAML with `instance-id` (fixed by namespace and name, so a re-seeded machine is the same
  instance), `local-hostname` and `provider-id`, which win over extra keys of the same name;
- each NIC is matched by MAC and named after its HybridMachine interface (`eth<index>` when unnamed);
- static addresses, or DHCPv4 when a NIC has none; a default route through the NIC's gateway, written
  `0.0.0.0/0` or `::/0` (cloud-init 22.4, Debian bookworm's, refuses `default`); nameservers per NIC.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from capfleet.api.base import GuestInterface

INSTANCE_ID_NAMESPACE = uuid.UUID("0c4f7b8e-6a55-4b8e-9a43-c2b1f0d7e6a1")


def instance_id(namespace: str, name: str) -> str:
    """A UUID fixed by the object's namespace and name (also a VM's libvirt domain UUID)."""
    return str(uuid.uuid5(INSTANCE_ID_NAMESPACE, f"{namespace}/{name}"))


def meta_data(
    instance: str, hostname: str, provider_id: str, extra: Mapping[str, str] | None = None
) -> bytes:
    """meta-data YAML; the fixed keys win over extra keys of the same name."""
    fields: dict[str, str] = {**(extra or {})}
    fields.update({"instance-id": instance, "local-hostname": hostname, "provider-id": provider_id})
    return yaml.safe_dump(fields, sort_keys=False).encode()


def default_route(gateway: str) -> str:
    return "0.0.0.0/0" if ipaddress.ip_address(gateway).version == 4 else "::/0"


def interface_name(interface: GuestInterface, index: int) -> str:
    return interface.name or f"eth{index}"


def ethernet(interface: GuestInterface, index: int) -> dict[str, Any]:
    """One network-config v2 ethernet: matched by MAC, renamed, static or DHCPv4."""
    config: dict[str, Any] = {
        "match": {"macaddress": interface.mac_address.lower()},
        "set-name": interface_name(interface, index),
    }
    if interface.addresses:
        config["addresses"] = [str(a) for a in interface.addresses]
    else:
        config["dhcp4"] = True
    if interface.gateway:
        config["routes"] = [{"to": default_route(str(interface.gateway)), "via": str(interface.gateway)}]
    if interface.nameservers:
        config["nameservers"] = {"addresses": [str(n) for n in interface.nameservers]}
    return config


def network_document(interfaces: Sequence[GuestInterface]) -> dict[str, Any]:
    """network-config version 2 as a mapping."""
    return {
        "version": 2,
        "ethernets": {interface_name(nic, i): ethernet(nic, i) for i, nic in enumerate(interfaces)},
    }


def network_config(interfaces: Sequence[GuestInterface]) -> bytes:
    """network-config version 2 YAML: one ethernet per NIC."""
    return yaml.safe_dump(network_document(interfaces), sort_keys=False).encode()
