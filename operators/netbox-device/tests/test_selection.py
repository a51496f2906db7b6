"""Unit tests: selection filters, owner values, remembered state, status building (no NetBox)."""

from __future__ import annotations

from typing import Any

from capfleet.api.netbox import (
    DeviceClaim,
    NetboxDeviceSelector,
    NetboxVirtualMachineSpec,
    VirtualMachineInterface,
)
from netbox_device import device_status, selection, vm_records
from netbox_device.selection import OWNER_FIELD, PREVIOUS_FIELD, Previous


def device(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": 7,
        "name": "n1",
        "serial": "SN1",
        "status": {"value": "inventory", "label": "Inventory"},
        "site": {"id": 1, "slug": "dc1"},
        "role": {"id": 2, "slug": "server"},
        "rack": {"id": 3, "name": "r1"},
        "tenant": {"id": 9, "slug": "old"},
        "description": "spare",
        "tags": [{"slug": "gpu"}],
        "custom_fields": {OWNER_FIELD: None, "rack_row": "A"},
        "oob_ip": {"address": "10.9.0.11/24"},
    }
    return {**base, **overrides}


def typed(selector: dict[str, Any]) -> NetboxDeviceSelector:
    return NetboxDeviceSelector.model_validate(selector)


def test_owner_names_instance_namespace_and_object() -> None:
    assert selection.owner_of("mgmt-a", {"namespace": "ns", "name": "m1"}) == "mgmt-a/ns/m1"


def test_filters_ask_for_free_devices_matching_every_criterion() -> None:
    selector = {"site": "dc1", "tags": ["gpu"], "customFields": {"rack_row": "A"}, "serial": "SN1"}
    assert selection.device_filters(typed(selector)) == {
        "status": "inventory",
        f"cf_{OWNER_FIELD}__empty": "true",
        "site": "dc1",
        "serial": "SN1",
        "tag": ["gpu"],
        "cf_rack_row": "A",
    }
    assert (
        selection.describe(typed(selector))
        == "status=inventory, site=dc1, serial=SN1, tags=[gpu], cf_rack_row=A"
    )


def test_matches_rechecks_a_device_before_claiming() -> None:
    selector = {"site": "dc1", "role": "server", "tags": ["gpu"], "customFields": {"rack_row": "A"}}
    assert selection.matches(device(), typed(selector))
    assert not selection.matches(device(custom_fields={OWNER_FIELD: "x/y/z"}), typed(selector))
    assert not selection.matches(device(status={"value": "active"}), typed(selector))
    assert not selection.matches(device(tags=[]), typed(selector))
    assert not selection.matches(device(), typed({**selector, "customFields": {"rack_row": "B"}}))
    assert selection.matches(device(), typed({"serial": "sn1"})), "serial matches case-insensitively"


def test_claim_then_release_restores_status_tenant_and_description() -> None:
    fields = selection.claim_fields(
        device(), "a/ns/m", DeviceClaim.model_validate({"status": "active", "description": "k8s"}), 5
    )
    assert fields["status"] == "active"
    assert fields["tenant"] == 5
    assert fields["description"] == "k8s"
    claimed = device(custom_fields=fields["custom_fields"])
    assert Previous.decode(claimed["custom_fields"][PREVIOUS_FIELD]) == Previous("inventory", 9, "spare")
    assert selection.release_fields(claimed) == {
        "custom_fields": {OWNER_FIELD: None, PREVIOUS_FIELD: None},
        "status": "inventory",
        "tenant": 9,
        "description": "spare",
    }


def test_claim_without_tenant_keeps_the_devices_tenant() -> None:
    fields = selection.claim_fields(device(), "a/ns/m", DeviceClaim.model_validate({}), None)
    assert (fields["tenant"], fields["status"], fields["description"]) == (9, "active", "spare")


def test_garbage_previous_state_is_ignored() -> None:
    assert Previous.decode("{not json") is None
    assert Previous.decode(None) is None


def test_status_with_both_mac_models_and_bmc_address() -> None:
    interfaces: list[dict[str, Any]] = [
        {"name": "eno2", "mac_address": "52:54:00:00:00:02", "mgmt_only": False},  # before 4.2
        {"name": "eno1", "primary_mac_address": {"mac_address": "52:54:00:00:00:01"}, "mac_address": None},
        # NetBox returns MACs in upper case.
        {"name": "bmc", "mgmt_only": True, "mac_addresses": [{"mac_address": "52:54:00:00:00:0A"}]},
        {"name": "lo"},
    ]
    fields = device_status.device_fields(device(), interfaces)
    assert fields["bmcAddress"] == "10.9.0.11"
    assert (fields["site"], fields["rack"], fields["serial"]) == ("dc1", "r1", "SN1")
    assert fields["interfaces"] == [
        {"name": "bmc", "mgmtOnly": True, "macAddress": "52:54:00:00:00:0a"},  # as the CRD requires
        {"name": "eno1", "mgmtOnly": False, "macAddress": "52:54:00:00:00:01"},
        {"name": "eno2", "mgmtOnly": False, "macAddress": "52:54:00:00:00:02"},
        {"name": "lo", "mgmtOnly": False},
    ]
    custom = device(custom_fields={"bmc_address": "redfish+https://10.0.0.1"})
    assert device_status.bmc_address(custom) == "redfish+https://10.0.0.1"
    assert device_status.bmc_address(device(oob_ip=None)) is None


def test_vm_changes_normalise_netbox_rendering() -> None:
    spec = NetboxVirtualMachineSpec.model_validate(
        {
            "connectionSecretRef": {"name": "netbox"},
            "name": "vm1",
            "vcpus": 2,
            "memoryMiB": 1024,
            "diskGiB": 10,
            "interfaces": [],
        }
    )
    desired = vm_records.vm_fields(spec, "a/ns/vm1", {"cluster": 4, "tenant": None})
    current = {
        "name": "vm1",
        "status": {"value": "active"},
        "cluster": {"id": 4},
        "role": None,
        "tenant": None,
        "site": None,
        "vcpus": "2.00",
        "memory": 1024,
        "disk": 10240,
        "description": "",
        "custom_fields": {OWNER_FIELD: "a/ns/vm1", "other": 1},
    }
    assert vm_records.changes(current, desired) == {}
    assert vm_records.changes({**current, "vcpus": 1.0}, desired) == {"vcpus": 2}


def test_primaries_are_the_first_of_each_family() -> None:
    interfaces = [
        VirtualMachineInterface(name="eth0", addresses=["2001:db8::1/64", "10.0.0.1/24"]),
        VirtualMachineInterface(name="eth1", addresses=["10.0.0.2/24"]),
    ]
    assert vm_records.primaries(interfaces) == ("10.0.0.1/24", "2001:db8::1/64")
    assert vm_records.same_address("10.0.0.1/24", "10.0.0.1/24")
    assert not vm_records.same_address("10.0.0.1/24", "10.0.0.1/25")
