"""The children's specs follow from the machine, its cluster and what was allocated or claimed."""

from __future__ import annotations

import pytest
from glue_helpers import cluster, metal_machine, vm_machine

from capfleet import cloudinit, errors
from capfleet.api.netbox import NetboxDeviceStatus
from capi_machine_glue import names, specs

FACTS = specs.MachineFacts(
    namespace="ns", name="cp-0", cluster="c1", data_secret="cp-0-bootstrap", group="KubeadmControlPlane/cp"
)
V4 = {"eth0": [specs.Allocation("192.0.2.21", 24, "192.0.2.1")]}
DEVICE = NetboxDeviceStatus.model_validate(
    {
        "deviceID": 42,
        "name": "srv-42",
        "serial": "SN42",
        "bmcAddress": "10.9.0.42",
        "interfaces": [
            {"name": "bmc", "macAddress": "aa:00:00:00:00:01", "mgmtOnly": True},
            {"name": "eno1", "macAddress": "aa:00:00:00:00:02"},
        ],
    }
)


def test_macs_are_deterministic_locally_administered_and_distinct() -> None:
    mac = names.mac_address("ns", "cp-0", "eth0")
    assert mac == names.mac_address("ns", "cp-0", "eth0")
    assert mac != names.mac_address("ns", "cp-1", "eth0")
    assert mac != names.mac_address("other", "cp-0", "eth0")
    first = int(mac.split(":")[0], 16)
    assert first & 0x02
    assert not first & 0x01


def test_long_names_are_cut_with_a_hash_that_keeps_them_distinct() -> None:
    a, b = names.fit("x" * 300 + "a"), names.fit("x" * 300 + "b")
    assert len(a) == len(b) == names.NAME_MAX
    assert a != b
    assert names.address_claim("m", "Ethernet1/1", 0) == "m-ethernet1-1-0"


def test_address_claims_one_per_pool_with_the_cluster_name() -> None:
    plans = specs.address_claims(vm_machine(), FACTS)
    assert [(p.name, p.interface) for p in plans] == [("cp-0-eth0-0", "eth0")]
    assert plans[0].spec.to_wire() == {
        "poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"},
        "clusterName": "c1",
    }


def test_vm_spec_merges_selectors_and_places_addresses_gateway_and_dns_on_the_default_nic() -> None:
    facts = specs.MachineFacts(**{**FACTS.__dict__, "failure_domain": "fd-a"})
    spec = specs.vm_spec(vm_machine(), cluster(), facts, V4).to_wire()
    assert spec["hypervisorSelector"] == {"matchLabels": {"rack": "r1", "zone": "a"}}
    assert spec["failureDomain"] == "fd-a"
    assert spec["antiAffinityKey"] == "KubeadmControlPlane/cp"
    assert [d["name"] for d in spec["disks"]] == ["root", "disk1"]
    assert spec["disks"][0]["sourceImage"] == "base.qcow2"
    assert "sourceImage" not in spec["disks"][1]
    eth0, eth1 = spec["interfaces"]
    assert eth0 == {
        "name": "eth0",
        "macAddress": names.mac_address("ns", "cp-0", "eth0"),
        "bridge": "br0",
        "userMode": False,
        "addresses": ["192.0.2.21/24"],
        "gateway": "192.0.2.1",
        "nameservers": ["192.0.2.53"],
    }
    assert eth1 == {
        "name": "eth1",
        "macAddress": names.mac_address("ns", "cp-0", "eth1"),
        "network": "storage",
        "userMode": False,
        "addresses": [],
        "nameservers": [],
    }
    assert spec["cloudInit"]["userDataSecretRef"] == {"name": "cp-0-bootstrap", "key": "value"}
    assert spec["cloudInit"]["metaData"] == {
        "control-plane-endpoint-host": "192.0.2.10",
        "control-plane-endpoint-port": "6443",
    }


def test_a_cluster_without_endpoint_yet_adds_no_meta_data() -> None:
    spec = specs.vm_spec(vm_machine(), cluster(controlPlaneEndpoint=None), FACTS, V4)
    assert spec.cloud_init.meta_data == {}


def test_unknown_failure_domain_and_conflicting_labels_are_invalid_specs() -> None:
    facts = specs.MachineFacts(**{**FACTS.__dict__, "failure_domain": "fd-z"})
    with pytest.raises(errors.InvalidSpec, match="fd-z is not declared"):
        specs.vm_spec(vm_machine(), cluster(), facts, V4)
    conflicting = vm_machine(
        vm={
            "vcpus": 1,
            "memoryMiB": 512,
            "disks": [{"sizeGiB": 1, "image": "i"}],
            "hypervisorSelector": {"matchLabels": {"rack": "r2"}},
        }
    )
    with pytest.raises(errors.InvalidSpec, match="rack is required to be both r1 and r2"):
        specs.vm_spec(conflicting, cluster(), FACTS, V4)


def test_netbox_vm_record_only_when_the_cluster_names_a_netbox_cluster_or_site() -> None:
    record = specs.netbox_vm_spec(vm_machine(), cluster(), FACTS, V4)
    assert record is not None
    assert record.cluster == "k8s-vms"
    assert record.tenant == "team-a"
    assert record.disk_gib == 15
    assert record.interfaces[0].addresses == ["192.0.2.21/24"]
    no_place = cluster(netbox={"connectionSecretRef": {"name": "netbox"}})
    assert specs.netbox_vm_spec(vm_machine(), no_place, FACTS, V4) is None


def test_device_selector_is_narrowed_by_the_failure_domain() -> None:
    facts = specs.MachineFacts(**{**FACTS.__dict__, "failure_domain": "fd-a"})
    spec = specs.device_spec(metal_machine(), cluster(), facts).to_wire()
    # status: the CRD's default; customFields: empty, as absent means.
    assert spec["selector"] == {
        "role": "worker",
        "tags": ["fast", "k8s"],
        "site": "dc-a",
        "status": "inventory",
        "customFields": {},
    }
    assert spec["claim"] == {
        "tenant": "team-a",
        "status": "active",
        "description": "capfleet machine ns/cp-0",
    }
    clash = metal_machine(
        baremetal={
            "deviceSelector": {"site": "dc-b"},
            "osProfile": {"kernelURL": "http://b/k", "initrdURL": "http://b/i"},
        }
    )
    with pytest.raises(errors.InvalidSpec, match="site is dc-b on the machine"):
        specs.device_spec(clash, cluster(), facts)
    with pytest.raises(errors.InvalidSpec, match=r"set spec\.netbox"):
        specs.device_spec(metal_machine(), cluster(netbox=None), FACTS)


def test_instance_spec_from_the_claimed_device() -> None:
    spec = specs.instance_spec(metal_machine(), cluster(), FACTS, DEVICE, {"eno1": V4["eth0"]})
    wire = spec.to_wire()
    assert wire["bmc"] == {
        "address": "redfish+https://10.9.0.42/redfish/v1/Systems/SN42",
        "credentialsSecretRef": {"name": "bmc"},
        "disableCertificateVerification": False,
        "allowRedfishHTTP": False,
        "addressCIDRs": ["10.9.0.0/16"],
    }
    assert wire["bootMACAddress"] == "aa:00:00:00:00:02"
    assert wire["providerID"] == "capfleet://metal/42"
    assert wire["interfaces"] == [
        {
            "name": "eno1",
            "macAddress": "aa:00:00:00:00:02",
            "addresses": ["192.0.2.21/24"],
            "gateway": "192.0.2.1",
            "nameservers": ["192.0.2.53"],
        }
    ]
    assert "networkData" not in wire
    assert wire["metaData"] == {
        "control-plane-endpoint-host": "192.0.2.10",
        "control-plane-endpoint-port": "6443",
    }
    assert "cleaning" not in wire, "unset: the instance's default for what deploys (an installer: disabled)"
    assert wire["maxProvisioningAttempts"] == 3
    assert "image" not in wire


def test_an_image_machine_carries_its_image_hints_and_attempts_to_the_instance() -> None:
    image = {"url": "https://images.example/node.raw", "checksum": "ab" * 32, "format": "raw"}
    baremetal = {
        "deviceSelector": {"role": "worker"},
        "image": image,
        "rootDeviceHints": {"minSizeGigabytes": 8},
        "maxProvisioningAttempts": 2,
    }
    spec = specs.instance_spec(
        metal_machine(baremetal=baremetal), cluster(), FACTS, DEVICE, {"eno1": V4["eth0"]}
    )
    wire = spec.to_wire()
    assert (wire["image"], wire["rootDeviceHints"], wire["maxProvisioningAttempts"]) == (
        image,
        {"minSizeGigabytes": 8},
        2,
    )
    assert "os" not in wire
    assert spec.cleans_metadata, "an image deployment cleans by default, as Metal3's hosts do"


def test_a_server_boots_with_the_network_config_it_had_before_and_a_vm_names_nics_alike() -> None:
    spec = specs.instance_spec(metal_machine(), cluster(), FACTS, DEVICE, {"eno1": V4["eth0"]})
    assert cloudinit.network_document(spec.interfaces) == {
        "version": 2,
        "ethernets": {
            "eno1": {
                "match": {"macaddress": "aa:00:00:00:00:02"},
                "set-name": "eno1",
                "addresses": ["192.0.2.21/24"],
                "routes": [{"to": "0.0.0.0/0", "via": "192.0.2.1"}],
                "nameservers": {"addresses": ["192.0.2.53"]},
            }
        },
    }
    vm = specs.vm_spec(vm_machine(), cluster(), FACTS, V4)
    assert list(cloudinit.network_document(vm.interfaces)["ethernets"]) == ["eth0", "eth1"]
    dhcp = specs.instance_spec(metal_machine(), cluster(), FACTS, DEVICE, {})
    assert cloudinit.network_document(dhcp.interfaces)["ethernets"]["eno1"] == {
        "match": {"macaddress": "aa:00:00:00:00:02"},
        "set-name": "eno1",
        "dhcp4": True,
        "nameservers": {"addresses": ["192.0.2.53"]},
    }


def test_an_interface_name_a_guest_cannot_use_leaves_the_nic_named_by_position() -> None:
    assert specs.guest_name("eno1") == "eno1"
    assert specs.guest_name("Ethernet1/1") is None
    assert specs.guest_name("a-very-long-interface") is None


def test_child_specs_parse_back_to_themselves() -> None:
    facts = specs.MachineFacts(**{**FACTS.__dict__, "failure_domain": "fd-a"})
    built = [
        specs.vm_spec(vm_machine(), cluster(), facts, V4),
        specs.netbox_vm_spec(vm_machine(), cluster(), facts, V4),
        specs.device_spec(metal_machine(), cluster(), facts),
        specs.instance_spec(metal_machine(), cluster(), facts, DEVICE, {"eno1": V4["eth0"]}),
        specs.address_claims(vm_machine(), facts)[0].spec,
    ]
    for spec in built:
        assert spec is not None
        assert type(spec).model_validate(spec.to_wire()) == spec


def test_server_problems_are_named() -> None:
    no_bmc = DEVICE.model_copy(update={"bmc_address": None})
    with pytest.raises(errors.InvalidSpec, match="no BMC address"):
        specs.instance_spec(metal_machine(), cluster(), FACTS, no_bmc, {})
    named = metal_machine(
        baremetal={
            "bootInterface": "eno9",
            "osProfile": {"kernelURL": "http://b/k", "initrdURL": "http://b/i"},
        }
    )
    with pytest.raises(errors.InvalidSpec, match="no interface eno9 with a MAC"):
        specs.instance_spec(named, cluster(), FACTS, DEVICE, {})
    with pytest.raises(errors.InvalidSpec, match="bmcCredentialsSecretRef"):
        specs.instance_spec(metal_machine(), cluster(baremetal=None), FACTS, DEVICE, {})
    unknown = metal_machine(network={"interfaces": [{"name": "eno2"}]})
    with pytest.raises(errors.InvalidSpec, match="no interface eno2 with a MAC") as raised:
        specs.instance_spec(unknown, cluster(), FACTS, DEVICE, {})
    assert raised.value.reason == "UnknownInterface"


@pytest.mark.parametrize(
    ("recorded", "template", "expected"),
    [
        # A full URL in NetBox, as `capfleet netbox-setup` documents the field, is used as it is.
        (
            "redfish+https://10.1.0.7/redfish/v1/Systems/abc",
            "redfish+https://{address}/redfish/v1/Systems/1",
            "redfish+https://10.1.0.7/redfish/v1/Systems/abc",
        ),
        ("ipmi://10.1.0.7:623", "redfish+https://{address}/redfish/v1/Systems/1", "ipmi://10.1.0.7:623"),
        # A bare address (or an out-of-band IP) goes through the cluster's template.
        (
            "10.1.0.7",
            "redfish+https://{address}/redfish/v1/Systems/1",
            "redfish+https://10.1.0.7/redfish/v1/Systems/1",
        ),
        ("10.1.0.7", "ipmi://{address}", "ipmi://10.1.0.7"),
        (
            "redfish+https://10.1.0.7/redfish/v1/Systems/abc",
            None,
            "redfish+https://10.1.0.7/redfish/v1/Systems/abc",
        ),
    ],
)
def test_a_bmc_url_in_netbox_is_used_as_is_and_a_bare_address_fills_the_template(
    recorded: str, template: str | None, expected: str
) -> None:
    device = NetboxDeviceStatus.model_validate({"name": "srv-1", "serial": "S1", "bmcAddress": recorded})
    assert specs.bmc_url(template, device) == expected
