"""The ipam-address operator's identity keeps its marks apart from the other operators'."""

from ipam_address import handlers
from ipam_address.settings import IpamSettings


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "ipam-address.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-ipam-address"


def test_the_instance_name_is_configured_like_the_other_operators() -> None:
    assert IpamSettings.variables() == {"instance": "CAPFLEET_INSTANCE_NAME"}
    assert IpamSettings.load({}).instance == ""
    assert IpamSettings.load({"CAPFLEET_INSTANCE_NAME": "mgmt-a"}).instance == "mgmt-a"
