"""The ipam-address operator's identity keeps its marks apart from the other operators'."""

from ipam_address import handlers


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "ipam-address.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-ipam-address"
