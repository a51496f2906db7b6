"""Seeding NetBox from a YAML-shaped dict, through the REST API (so it works on a real NetBox too).

    tenants: [{name: Acme, slug: acme}]
    tags: [{name: capfleet, slug: capfleet}]
    custom_fields: [{name: capfleet_owner, type: text, object_types: [ipam.ipaddress], filter_logic: exact}]
    vrfs: [{name: prod}]
    prefixes: [{prefix: 10.0.0.0/24, vrf: prod, tenant: acme, tags: [capfleet]}]
    ip_ranges: [{start_address: 10.0.1.10/24, end_address: 10.0.1.20/24}]
    ip_addresses: [{address: 10.0.0.5/24, custom_fields: {capfleet_owner: ns/a}}]
    sites / manufacturers / device_roles / cluster_types: [{name, slug}]
    device_types: [{manufacturer: acme, model: M1, slug: m1}]
    racks: [{name: r1, site: dc1}]
    clusters: [{name: c1, type: kvm}]
    devices: [{name: n1, serial: S1, site: dc1, role: server, device_type: m1, rack: r1,
               interfaces: [{name: bmc, type: 1000base-t, mac_address: "52:54:00:00:00:01",
                             ip_addresses: [10.9.0.11/24]}],
               oob_ip: 10.9.0.11/24}]
    virtual_machines: [{name: vm1, cluster: c1, interfaces: [{name: eth0}]}]

References name what the seed created (by name, slug or address) and fall back to `{"name": ...}` lookups
for objects that already exist. Interface MACs are MAC-address objects (NetBox ≥ 4.2).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from capfleet_e2e.netbox.client import NetboxClient

# kind → (endpoint, key field, {reference field: referenced kind})
KINDS: dict[str, tuple[str, str, dict[str, str]]] = {
    "tenants": ("tenancy/tenants", "slug", {}),
    "tags": ("extras/tags", "slug", {}),
    "custom_fields": ("extras/custom-fields", "name", {}),
    "vrfs": ("ipam/vrfs", "name", {"tenant": "tenants"}),
    "prefixes": ("ipam/prefixes", "prefix", {"vrf": "vrfs", "tenant": "tenants"}),
    "ip_ranges": ("ipam/ip-ranges", "start_address", {"vrf": "vrfs", "tenant": "tenants"}),
    "ip_addresses": ("ipam/ip-addresses", "address", {"vrf": "vrfs", "tenant": "tenants"}),
    "sites": ("dcim/sites", "slug", {"tenant": "tenants"}),
    "manufacturers": ("dcim/manufacturers", "slug", {}),
    "device_roles": ("dcim/device-roles", "slug", {}),
    "device_types": ("dcim/device-types", "slug", {"manufacturer": "manufacturers"}),
    "racks": ("dcim/racks", "name", {"site": "sites", "tenant": "tenants"}),
    "cluster_types": ("virtualization/cluster-types", "slug", {}),
    "clusters": ("virtualization/clusters", "name", {"type": "cluster_types", "tenant": "tenants"}),
    "devices": (
        "dcim/devices",
        "name",
        {
            "site": "sites",
            "role": "device_roles",
            "device_type": "device_types",
            "rack": "racks",
            "tenant": "tenants",
        },
    ),
    "virtual_machines": (
        "virtualization/virtual-machines",
        "name",
        {"cluster": "clusters", "role": "device_roles", "site": "sites", "tenant": "tenants"},
    ),
}
INTERFACES = {
    "devices": ("dcim/interfaces", "device", "dcim.interface"),
    "virtual_machines": ("virtualization/interfaces", "virtual_machine", "virtualization.vminterface"),
}


class Seeded:
    """What a seed created: `seeded["devices"]["n1"]` is the created device (as the API returned it)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)

    def __getitem__(self, kind: str) -> dict[str, dict[str, Any]]:
        return self.objects[kind]

    def id(self, kind: str, key: str) -> int:
        pk: int = self.objects[kind][key]["id"]
        return pk


def reference(seeded: Seeded, kind: str, value: Any) -> Any:
    """An id for something this seed created, else an attribute lookup NetBox resolves itself."""
    if not isinstance(value, str):
        return value
    if value in seeded[kind]:
        return seeded.id(kind, value)
    return {KINDS[kind][1]: value}


def prepare(kind: str, item: dict[str, Any], seeded: Seeded) -> dict[str, Any]:
    body = {k: v for k, v in item.items() if k not in ("interfaces", "oob_ip", "primary_ip4", "primary_ip6")}
    for field, target in KINDS[kind][2].items():
        if field in body:
            body[field] = reference(seeded, target, body[field])
    if "tags" in body:
        body["tags"] = [reference(seeded, "tags", t) for t in body["tags"]]
    return body


def apply_seed(client: NetboxClient, data: dict[str, Any]) -> Seeded:
    """Create everything in `data`, in dependency order; returns what was created."""
    unknown = set(data) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown seed sections: {sorted(unknown)}")
    seeded = Seeded()
    for kind, (endpoint, key, _) in KINDS.items():
        for item in data.get(kind) or []:
            created = client.create(endpoint, prepare(kind, item, seeded))
            seeded[kind][str(item[key])] = created
            if kind in INTERFACES:
                seed_interfaces(client, seeded, kind, item, created)
    return seeded


def seed_interfaces(
    client: NetboxClient,
    seeded: Seeded,
    kind: str,
    item: dict[str, Any],
    parent: dict[str, Any],
) -> None:
    """A device's or VM's interfaces with their MACs and IPs, then its primary and OOB IPs."""
    endpoint, parent_field, label = INTERFACES[kind]
    addresses: dict[str, int] = {}
    for spec in item.get("interfaces") or []:
        body = {"name": spec["name"], parent_field: parent["id"]}
        if kind == "devices":
            body["type"] = spec.get("type", "1000base-t")
        body.update(
            {k: v for k, v in spec.items() if k not in ("ip_addresses", "mac_address", "name", "type")}
        )
        mac = spec.get("mac_address")
        interface = client.create(endpoint, body)
        if mac:
            mac_object = client.create(
                "dcim/mac-addresses",
                {"mac_address": mac, "assigned_object_type": label, "assigned_object_id": interface["id"]},
            )
            client.update(endpoint, interface["id"], {"primary_mac_address": mac_object["id"]})
        for address in spec.get("ip_addresses") or []:
            ip_body = {
                "address": address,
                "assigned_object_type": label,
                "assigned_object_id": interface["id"],
            }
            ip = client.create("ipam/ip-addresses", ip_body)
            addresses[address] = ip["id"]
            seeded["ip_addresses"][address] = ip
    links = {
        f: addresses[item[f]] for f in ("oob_ip", "primary_ip4", "primary_ip6") if item.get(f) in addresses
    }
    if links:
        seeded[kind][str(item["name"])] = client.update(KINDS[kind][0], parent["id"], links)
