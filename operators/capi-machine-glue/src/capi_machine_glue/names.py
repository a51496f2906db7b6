"""Deterministic names, MAC addresses and provider IDs of a machine's children.

A retry after a crash, a lost status or a clusterctl move must find what an earlier attempt made, so
everything the glue creates is named from the HybridMachine's namespace and name alone, never from a UID
or a random value. MACs are derived the same way: a VM keeps its MAC (and so its DHCP lease and NetBox
record) across moves and restarts.
"""

from __future__ import annotations

import hashlib
import re

NAME_MAX = 253
_UNSAFE = re.compile(r"[^a-z0-9-]+")
ENDPOINT_CLAIM_SUFFIX = "control-plane-endpoint"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(parts).encode()).digest()


def fit(name: str, limit: int = NAME_MAX) -> str:
    """`name` if it fits, else its head and a short hash, so distinct long names stay distinct."""
    if len(name) <= limit:
        return name
    suffix = _digest(name).hex()[:10]
    return f"{name[: limit - len(suffix) - 1].rstrip('-')}-{suffix}"


def dns_label(text: str) -> str:
    """`text` (an interface name such as `Ethernet1/1`) as a lower-case DNS label fragment."""
    return _UNSAFE.sub("-", text.lower()).strip("-") or "if"


def address_claim(machine: str, interface: str, index: int) -> str:
    """The IPAddressClaim for the `index`th pool of one interface."""
    return fit(f"{machine}-{dns_label(interface)}-{index}")


def endpoint_claim(cluster: str) -> str:
    """The IPAddressClaim of a HybridCluster's control-plane VIP."""
    return fit(f"{cluster}-{ENDPOINT_CLAIM_SUFFIX}")


def mac_address(namespace: str, machine: str, interface: str) -> str:
    """A locally administered unicast MAC (QEMU's 52: first octet) with 40 bits from the names."""
    tail = _digest(namespace, machine, interface)[:5]
    return ":".join(f"{octet:02x}" for octet in (0x52, *tail))


def vm_provider_id(hypervisor: str, domain: str) -> str:
    return f"capfleet://vm/{hypervisor}/{domain}"


def metal_provider_id(device_id: int) -> str:
    return f"capfleet://metal/{device_id}"
