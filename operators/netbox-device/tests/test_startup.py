"""The netbox-device operator's identity keeps its marks apart from the other operators'."""

from netbox_device import handlers


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "netbox-device.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-netbox-device"
