"""The one NoCloud renderer of the fleet: the documents VMs and servers boot with."""

from __future__ import annotations

import yaml

from capfleet import cloudinit
from capfleet.api.base import GuestInterface
from capfleet.api.libvirt import VMInterface


def test_meta_data_fixed_keys_win_over_extra_ones() -> None:
    rendered = yaml.safe_load(
        cloudinit.meta_data("id-1", "node-a", "capfleet://vm/hv/d", {"local-hostname": "x", "zone": "a"})
    )
    assert rendered == {
        "zone": "a",
        "instance-id": "id-1",
        "local-hostname": "node-a",
        "provider-id": "capfleet://vm/hv/d",
    }


def test_instance_ids_are_fixed_by_namespace_and_name() -> None:
    assert cloudinit.instance_id("ns", "m") == cloudinit.instance_id("ns", "m")
    assert cloudinit.instance_id("ns", "m") != cloudinit.instance_id("ns2", "m")
    assert cloudinit.instance_id("a-b", "c") != cloudinit.instance_id("a", "b-c")


def test_nics_are_matched_by_mac_and_named_after_their_interface() -> None:
    document = cloudinit.network_document(
        [
            GuestInterface(
                name="prov",
                mac_address="52:54:00:aa:00:01",
                addresses=["10.0.0.5/24", "fd00::5/64"],
                gateway="10.0.0.1",
                nameservers=["10.0.0.53"],
            ),
            GuestInterface(mac_address="52:54:00:aa:00:02", gateway="fd00::1", addresses=["fd00::6/64"]),
            GuestInterface(mac_address="52:54:00:aa:00:03"),
        ]
    )
    assert document == {
        "version": 2,
        "ethernets": {
            "prov": {
                "match": {"macaddress": "52:54:00:aa:00:01"},
                "set-name": "prov",
                "addresses": ["10.0.0.5/24", "fd00::5/64"],
                "routes": [{"to": "0.0.0.0/0", "via": "10.0.0.1"}],
                "nameservers": {"addresses": ["10.0.0.53"]},
            },
            "eth1": {
                "match": {"macaddress": "52:54:00:aa:00:02"},
                "set-name": "eth1",
                "addresses": ["fd00::6/64"],
                "routes": [{"to": "::/0", "via": "fd00::1"}],
            },
            "eth2": {"match": {"macaddress": "52:54:00:aa:00:03"}, "set-name": "eth2", "dhcp4": True},
        },
    }


def test_a_vm_nic_renders_as_the_same_guest_nic() -> None:
    """Where the machine lands changes nothing in its guest: a VM NIC renders like a server NIC."""
    common = {"name": "eth0", "mac_address": "52:54:00:aa:00:01", "addresses": ["10.0.0.5/24"]}
    vm = VMInterface(**common, bridge="br0")
    server = GuestInterface(**common)
    assert cloudinit.network_config([vm]) == cloudinit.network_config([server])
    assert yaml.safe_load(cloudinit.network_config([vm]))["ethernets"]["eth0"]["set-name"] == "eth0"
