"""The NoCloud seed of a VM: user-data, meta-data and network-config, and the `cidata` ISO holding them.

cloud-init (and capfleet's test image) finds its seed on a volume labelled `cidata`. The ISO is built in
memory with pycdlib (no genisoimage on the operator's image) and uploaded through the libvirt connection,
so nothing is written to the operator's disk. Pure functions: the same spec gives the same seed files.
"""

from __future__ import annotations

import io
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import pycdlib
import yaml

from capfleet.api.libvirt import VMInterface

SEED_FILES = ("user-data", "meta-data", "network-config")


def meta_data(
    instance_id: str, hostname: str, provider_id: str, extra: Mapping[str, str] | None = None
) -> bytes:
    """meta-data YAML; the fixed keys win over extra keys of the same name."""
    fields: dict[str, str] = {**(extra or {})}
    fields.update({"instance-id": instance_id, "local-hostname": hostname, "provider-id": provider_id})
    return yaml.safe_dump(fields, sort_keys=False).encode()


def _ethernet(interface: VMInterface, index: int) -> dict[str, Any]:
    name = f"eth{index}"
    config: dict[str, Any] = {"match": {"macaddress": interface.mac_address.lower()}, "set-name": name}
    if interface.addresses:
        config["addresses"] = [str(a) for a in interface.addresses]
    else:
        config["dhcp4"] = True
    if interface.gateway:
        config["routes"] = [
            {
                # Not "default": cloud-init 22.4 (Debian bookworm) refuses it as an address.
                "to": "0.0.0.0/0" if ipaddress.ip_address(str(interface.gateway)).version == 4 else "::/0",
                "via": str(interface.gateway),
            }
        ]
    if interface.nameservers:
        config["nameservers"] = {"addresses": [str(n) for n in interface.nameservers]}
    return config


def network_config(interfaces: list[VMInterface]) -> bytes:
    """Network config version 2: one ethernet per NIC, matched by MAC, static addresses or DHCP."""
    ethernets = {f"eth{i}": _ethernet(nic, i) for i, nic in enumerate(interfaces)}
    return yaml.safe_dump({"version": 2, "ethernets": ethernets}, sort_keys=False).encode()


def seed_files(user_data: bytes, meta: bytes, network: bytes) -> dict[str, bytes]:
    return {"user-data": user_data, "meta-data": meta, "network-config": network}


def cidata_iso(files: Mapping[str, bytes]) -> bytes:
    """An ISO 9660 image labelled `cidata`; Rock Ridge and Joliet keep the file names as written."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    try:
        for name in sorted(files):
            data = files[name]
            short = re.sub(r"[^A-Z0-9]", "", name.upper())[:8]
            iso.add_fp(io.BytesIO(data), len(data), f"/{short}.;1", rr_name=name, joliet_path=f"/{name}")
        out = io.BytesIO()
        iso.write_fp(out)
    finally:
        iso.close()
    return out.getvalue()
