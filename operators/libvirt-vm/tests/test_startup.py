"""The libvirt-vm operator's identity keeps its marks apart from the other operators'."""

from libvirt_vm import handlers


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "libvirt-vm.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-libvirt-vm"
