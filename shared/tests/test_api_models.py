"""The API models: samples parse, wire names are camelCase, the registry is consistent."""

from __future__ import annotations

from typing import Any

import pytest

from capfleet.api import (
    baremetal,
    base,
    hybrid_clusters,
    hybrid_machines,
    ipam,
    kinds,
    libvirt,
    netbox,
    samples,
)
from capfleet.resources import Resource


def contains(actual: Any, expected: Any) -> bool:
    """Whether `actual` has every key and list item of `expected` (defaults may add more keys)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(contains(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected)


@pytest.mark.parametrize("sample", samples.valid_samples(), ids=lambda s: str(s["kind"]))
def test_every_valid_sample_parses_and_round_trips(sample: dict[str, Any]) -> None:
    kind = kinds.by_kind(sample["kind"])
    parsed = kind.parse(sample)
    wire = parsed.to_wire()
    assert contains(wire, sample)
    assert kind.parse(wire) == parsed


def test_there_is_a_valid_sample_of_every_kind() -> None:
    assert [s["kind"] for s in samples.valid_samples()] == [k.kind for k in kinds.ALL]


def test_invalid_samples_name_their_rule() -> None:
    invalid = samples.invalid_samples()
    assert {i.name for i in invalid} >= {
        "vm and baremetal both set",
        "bad CIDR in a HybridIPPool",
        "missing required field",
        "hypervisorName changed",
    }
    assert all(i.message for i in invalid)


def test_wire_names_keep_their_initialisms() -> None:
    vm = libvirt.LibvirtVMSpec(
        vcpus=1,
        memory_mib=128,
        hypervisor_name="hv1",
        disks=[libvirt.VMDisk(name="root", size_gib=1)],
        cloud_init=libvirt.CloudInit(
            user_data_secret_ref=base.SecretKeyReference(name="boot"), provider_id="capfleet://vm/hv1/d"
        ),
    ).to_wire()
    assert vm["memoryMiB"] == 128
    assert vm["hypervisorName"] == "hv1"
    assert vm["disks"] == [{"name": "root", "sizeGiB": 1, "cloneStrategy": "BackingFile"}]
    assert vm["cloudInit"]["providerID"] == "capfleet://vm/hv1/d"
    assert vm["cloudInit"]["userDataSecretRef"] == {"name": "boot", "key": "value"}

    assert set(libvirt.LibvirtVMStatus(domain_uuid="u").to_wire()) == {"domainUUID", "conditions"}
    assert "deviceID" in netbox.NetboxDeviceStatus(device_id=3).to_wire()
    assert "virtualMachineID" in netbox.NetboxVirtualMachineStatus(virtual_machine_id=3).to_wire()
    profile = baremetal.OSProfile(kernel_url="http://a/k", initrd_url="http://a/i").to_wire()
    assert set(profile) == {"kernelURL", "initrdURL", "kernelArgs"}
    pool = ipam.HybridIPPoolSpec(addresses=["10.0.0.0/24"], prefix=24).to_wire()
    assert pool["allocateReservedIPAddresses"] is False
    assert "excludedAddresses" in pool


def test_fields_are_populated_by_wire_name_or_python_name() -> None:
    by_alias = libvirt.Capacity.model_validate({"vcpus": 4, "memoryMiB": 1024, "storageGiB": 50})
    by_name = libvirt.Capacity(vcpus=4, memory_mib=1024, storage_gib=50)
    assert by_alias == by_name


def test_unknown_fields_from_a_newer_peer_are_ignored() -> None:
    status = libvirt.LibvirtVMStatus.model_validate({"state": "running", "addedInV2": {"x": 1}})
    assert status.state == "running"
    assert "addedInV2" not in status.to_wire()


def test_conditions_use_the_metav1_wire_shape() -> None:
    condition = base.Condition(
        type="Ready", status="True", reason="Ready", last_transition_time="2024-01-01T00:00:00Z"
    )
    assert condition.to_wire() == {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    parsed = base.Condition.model_validate({**condition.to_wire(), "observedGeneration": 3})
    assert parsed.observed_generation == 3


def test_a_template_holds_the_shape_of_the_object_it_makes() -> None:
    template = kinds.HYBRID_MACHINE_TEMPLATE.parse(
        next(s for s in samples.valid_samples() if s["kind"] == "HybridMachineTemplate")
    )
    machine = hybrid_machines.HybridMachineSpec.model_validate(template.spec.template.spec.to_wire())
    assert machine.baremetal is not None
    assert machine.baremetal.image is not None
    assert machine.baremetal.image.checksum == "https://images.example.test/capfleet-node.raw.sha256"
    assert machine.baremetal.image.format == "raw"
    assert issubclass(hybrid_clusters.HybridClusterSpec, hybrid_clusters.HybridClusterShape)


def test_netbox_device_selector_defaults_to_inventory_and_claims_to_active() -> None:
    spec = netbox.NetboxDeviceSpec.model_validate({"connectionSecretRef": {"name": "nb"}})
    assert spec.selector.status == "inventory"
    assert spec.claim.status == "active"


def test_registry_names_every_kind_once() -> None:
    assert len(kinds.ALL) == 12
    assert len({k.kind for k in kinds.ALL}) == len(kinds.ALL)
    short_names = [name for k in kinds.ALL for name in k.short_names]
    assert len(set(short_names)) == len(short_names)
    assert {k.owner for k in kinds.ALL} == set(kinds.OPERATORS)
    assert kinds.by_kind("HybridIPPool") is kinds.HYBRID_IPPOOL
    with pytest.raises(KeyError):
        kinds.by_kind("Pod")


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_registry_entries_match_their_models(kind: kinds.Kind[Any]) -> None:
    assert kind.model.__name__ == kind.kind
    assert kind.spec.__name__ == f"{kind.kind}Spec"
    assert kind.has_status != kind.kind.endswith("Template")
    assert kind.resource.version == kinds.VERSION
    assert kind.resource.plural == kind.kind.lower() + "s"


def test_registry_resources_serve_the_kube_client() -> None:
    assert kinds.HYBRID_IPPOOL.resource == Resource(
        "ipam.capfleet.dev", "v1alpha1", "hybridippools", "HybridIPPool"
    )
    assert (
        kinds.HYBRID_IPPOOL.resource.path("ns", "pool")
        == "/apis/ipam.capfleet.dev/v1alpha1/namespaces/ns/hybridippools/pool"
    )
    assert (
        kinds.HYPERVISOR.resource.path("ignored", "hv1")
        == "/apis/libvirt.capfleet.dev/v1alpha1/hypervisors/hv1"
    )
    assert kinds.owned_by(kinds.LIBVIRT_VM_OPERATOR) == (kinds.HYPERVISOR, kinds.LIBVIRT_VM, kinds.VM_QUOTA)
    assert all(k.capi_contract == (k.resource.group == kinds.INFRASTRUCTURE_GROUP) for k in kinds.ALL)
