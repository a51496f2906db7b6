"""libvirt-vm's settings keep their environment variable names, and the domain type follows them."""

from __future__ import annotations

import pytest

from libvirt_vm.settings import LibvirtSettings


def test_settings_are_read_from_their_variables() -> None:
    settings = LibvirtSettings.load(
        {
            "CAPFLEET_HYPERVISOR_POLL_SECONDS": "2",
            "CAPFLEET_VM_POLL_SECONDS": "3",
            "CAPFLEET_VCPU_OVERCOMMIT": "4",
            "CAPFLEET_STORAGE_OVERCOMMIT": "1.5",
            "CAPFLEET_LIBVIRT_DOMAIN_TYPE": "qemu",
        }
    )
    assert settings == LibvirtSettings(
        hypervisor_poll_seconds=2.0,
        vm_poll_seconds=3.0,
        vcpu_overcommit=4.0,
        storage_overcommit=1.5,
        domain_type="qemu",
    )
    assert LibvirtSettings.load({}) == LibvirtSettings()


def test_a_bad_value_names_its_variable() -> None:
    with pytest.raises(ValueError, match="CAPFLEET_VM_POLL_SECONDS"):
        LibvirtSettings.load({"CAPFLEET_VM_POLL_SECONDS": "soon"})


@pytest.mark.parametrize(
    ("configured", "kvm_offered", "expected"),
    [("auto", True, "kvm"), ("auto", False, "qemu"), ("qemu", True, "qemu"), ("kvm", False, "kvm")],
)
def test_the_domain_type_is_the_configured_one_or_kvm_when_offered(
    configured: str, kvm_offered: bool, expected: str
) -> None:
    assert LibvirtSettings(domain_type=configured).virt_type(kvm_offered) == expected


def test_only_auto_leaves_the_domain_type_to_the_host() -> None:
    assert LibvirtSettings(domain_type="auto").configured_virt_type is None
    assert LibvirtSettings(domain_type="qemu").configured_virt_type == "qemu"
