"""What netbox-device relies on in NetBox's DCIM, virtualization and journal APIs, and the seeding helper.

Device selection filters, OOB and primary IPs, MAC address objects (NetBox ≥ 4.2), journal entries, VMs
with interfaces, and NetBox's cascades when a device or VM is deleted; against real NetBox.
"""

from __future__ import annotations

from typing import Any

import pynetbox

from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.netbox.seed import Seeded, apply_seed

INVENTORY: dict[str, Any] = {
    "tenants": [{"name": "fleet", "slug": "fleet"}],
    "tags": [{"name": "capfleet", "slug": "capfleet"}],
    "custom_fields": [
        {"name": "bmc_address", "type": "text", "object_types": ["dcim.device"], "filter_logic": "exact"},
        {"name": "capfleet_owner", "type": "text", "object_types": ["dcim.device"], "filter_logic": "exact"},
    ],
    "sites": [{"name": "dc1", "slug": "dc1"}, {"name": "dc2", "slug": "dc2"}],
    "manufacturers": [{"name": "acme", "slug": "acme"}],
    "device_roles": [{"name": "server", "slug": "server"}, {"name": "switch", "slug": "switch"}],
    "device_types": [{"manufacturer": "acme", "model": "M1", "slug": "m1"}],
    "racks": [{"name": "r1", "site": "dc1"}],
    "cluster_types": [{"name": "kvm", "slug": "kvm"}],
    "clusters": [{"name": "c1", "type": "kvm"}],
    "devices": [
        {
            "name": "node-1",
            "serial": "SN-0001",
            "site": "dc1",
            "rack": "r1",
            "role": "server",
            "device_type": "m1",
            "status": "active",
            "tags": ["capfleet"],
            "interfaces": [
                {"name": "bmc", "mgmt_only": True, "mac_address": "52:54:00:aa:00:01",
                 "ip_addresses": ["10.9.0.11/24"]},
                {"name": "eth0", "mac_address": "52:54:00:00:00:01"},
            ],
            "oob_ip": "10.9.0.11/24",
        },
        {"name": "node-2", "serial": "SN-0002", "site": "dc1", "role": "server", "device_type": "m1",
         "status": "planned"},
        {"name": "sw-1", "site": "dc2", "role": "switch", "device_type": "m1"},
    ],
}  # fmt: skip


def seed(netbox: NetboxInstance) -> Seeded:
    return apply_seed(netbox.client, INVENTORY)


def names(netbox: NetboxInstance, **params: Any) -> list[str]:
    return [d["name"] for d in netbox.client.list_all("dcim/devices", **params)]


def test_device_filters_select_free_hardware(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    site = {"site": "dc1"}
    assert names(netbox, **site, role="server") == ["node-1", "node-2"]
    assert names(netbox, **site, serial="sn-0002") == ["node-2"]
    assert names(netbox, **site, status="planned") == ["node-2"]
    assert names(netbox, **site, has_oob_ip="true") == ["node-1"]
    assert names(netbox, **site, tag="capfleet") == ["node-1"]
    assert names(netbox, name=["node-1", "sw-1"]) == ["node-1", "sw-1"]
    bad = netbox.client.request("GET", "dcim/devices", params={"role": "no-such-role-here"})
    assert bad.status == 400
    assert "role" in bad.body
    node = seeded["devices"]["node-1"]
    assert node["oob_ip"]["address"] == "10.9.0.11/24"
    assert node["rack"]["name"] == "r1"
    assert node["custom_fields"]["bmc_address"] is None


def test_claiming_a_device_by_owner_custom_field(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    owner = "capfleet_owner"
    nb = pynetbox.api(netbox.url, token=netbox.token)
    device = nb.dcim.devices.get(seeded.id("devices", "node-2"))
    tenant = seeded.id("tenants", "fleet")
    assert device.update(
        {"custom_fields": {owner: "mgmt-a/ns/claim-1"}, "tenant": tenant, "status": "staged"}
    )
    claimed = nb.dcim.devices.filter(**{f"cf_{owner}": "mgmt-a/ns/claim-1"})
    assert [d.name for d in claimed] == ["node-2"]
    assert list(nb.dcim.devices.filter(**{f"cf_{owner}": "mgmt-a/ns/claim"})) == []
    entry = nb.extras.journal_entries.create(
        assigned_object_type="dcim.device",
        assigned_object_id=device.id,
        kind="info",
        comments="claimed by capfleet",
    )
    assert entry.assigned_object.id == device.id
    assert entry.kind.value == "info"
    journal = nb.extras.journal_entries.filter(
        assigned_object_type="dcim.device", assigned_object_id=device.id
    )
    assert [j.comments for j in journal] == ["claimed by capfleet"]


def test_oob_and_primary_ips_must_be_on_the_devices_own_interfaces(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    stray = netbox.client.create("ipam/ip-addresses", {"address": "10.9.1.99/24"})
    node2 = seeded.id("devices", "node-2")
    refused = netbox.client.request("PATCH", f"dcim/devices/{node2}", {"oob_ip": stray["id"]})
    assert (refused.status, refused.body) == (
        400,
        {"oob_ip": ["The specified IP address (10.9.1.99/24) is not assigned to this device."]},
    )
    oob = seeded.id("ip_addresses", "10.9.0.11/24")
    node1 = seeded.id("devices", "node-1")
    assert (
        netbox.client.call("PATCH", f"dcim/devices/{node1}", {"primary_ip4": oob})["primary_ip"]["id"] == oob
    )


def test_mac_addresses_from_4_2_are_objects(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    interfaces = netbox.client.list_all("dcim/interfaces", device_id=seeded.id("devices", "node-1"))
    eth0 = next(i for i in interfaces if i["name"] == "eth0")
    assert eth0["mac_address"] == "52:54:00:00:00:01"
    assert eth0["primary_mac_address"]["mac_address"] == "52:54:00:00:00:01"
    assert [m["mac_address"] for m in eth0["mac_addresses"]] == ["52:54:00:00:00:01"]
    ignored = netbox.client.update("dcim/interfaces", eth0["id"], {"mac_address": "52:54:00:00:00:09"})
    assert ignored["mac_address"] == "52:54:00:00:00:01"
    second = netbox.client.create(
        "dcim/mac-addresses",
        {
            "mac_address": "52:54:00:00:00:02",
            "assigned_object_type": "dcim.interface",
            "assigned_object_id": eth0["id"],
        },
    )
    switched = netbox.client.update("dcim/interfaces", eth0["id"], {"primary_mac_address": second["id"]})
    assert switched["mac_address"] == "52:54:00:00:00:02"
    assert len(switched["mac_addresses"]) == 2
    bmc = next(i for i in interfaces if i["name"] == "bmc")
    foreign = netbox.client.request(
        "PATCH", f"dcim/interfaces/{bmc['id']}", {"primary_mac_address": second["id"]}
    )
    assert foreign.status == 400
    assert "primary_mac_address" in foreign.body
    by_mac = netbox.client.list_all("dcim/mac-addresses", mac_address="52:54:00:aa:00:01")
    assert [m["assigned_object"]["id"] for m in by_mac] == [bmc["id"]]
    assert [i["id"] for i in netbox.client.list_all("dcim/interfaces", mac_address="52:54:00:00:00:02")] == [
        eth0["id"]
    ]


def test_deleting_a_device_deletes_its_interfaces_and_their_addresses(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    node = seeded.id("devices", "node-1")
    oob = seeded.id("ip_addresses", "10.9.0.11/24")
    site = seeded.id("sites", "dc1")
    protected = netbox.client.request("DELETE", f"dcim/sites/{site}")
    assert protected.status == 409
    netbox.client.delete("dcim/devices", node)
    assert netbox.client.request("GET", f"ipam/ip-addresses/{oob}").status == 404
    assert netbox.client.list_all("dcim/interfaces", device_id=seeded.id("devices", "node-2")) == []


def test_virtual_machines_with_interfaces_and_primary_ips(netbox: NetboxInstance) -> None:
    seeded = seed(netbox)
    client = netbox.client
    vm = client.create(
        "virtualization/virtual-machines",
        {
            "name": "vm-1",
            "cluster": seeded.id("clusters", "c1"),
            "role": seeded.id("device_roles", "server"),
            "vcpus": 2,
            "memory": 4096,
            "disk": 20,
            "status": "staged",
        },
    )
    assert vm["vcpus"] == 2.0
    assert vm["status"]["value"] == "staged"
    eth0 = client.create("virtualization/interfaces", {"virtual_machine": vm["id"], "name": "eth0"})
    ip = client.create("ipam/ip-addresses", {"address": "10.60.0.5/24"})
    refused = client.request(
        "PATCH", f"virtualization/virtual-machines/{vm['id']}", {"primary_ip4": ip["id"]}
    )
    assert refused.body == {
        "primary_ip4": ["The specified IP address (10.60.0.5/24) is not assigned to this VM."]
    }
    client.update(
        "ipam/ip-addresses",
        ip["id"],
        {"assigned_object_type": "virtualization.vminterface", "assigned_object_id": eth0["id"]},
    )
    linked = client.update("virtualization/virtual-machines", vm["id"], {"primary_ip4": ip["id"]})
    assert linked["primary_ip4"]["address"] == "10.60.0.5/24"
    unassign = {"assigned_object_type": None, "assigned_object_id": None}
    stuck = client.request("PATCH", f"ipam/ip-addresses/{ip['id']}", unassign)
    message = "Cannot reassign IP address while it is designated as the primary IP for the parent object"
    assert (stuck.status, stuck.body) == (400, {"__all__": [message]})
    assert client.get(f"ipam/ip-addresses/{ip['id']}")["assigned_object"]["virtual_machine"]["id"] == vm["id"]
    duplicate = client.request(
        "POST",
        "virtualization/virtual-machines",
        {"name": "vm-1", "cluster": seeded.id("clusters", "c1")},
    )
    assert duplicate.body == {"__all__": ["Virtual machine name must be unique per cluster."]}
    client.delete("virtualization/virtual-machines", vm["id"])
    assert client.request("GET", f"ipam/ip-addresses/{ip['id']}").status == 404
