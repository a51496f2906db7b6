"""The baremetal-provision operator's identity keeps its marks apart from the other operators'."""

from baremetal_provision import handlers


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "baremetal-provision.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-baremetal-provision"
