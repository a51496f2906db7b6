"""The netbox-device operator's identity keeps its marks apart; its settings keep their variable names."""

from netbox_device import handlers
from netbox_device.settings import NetboxSettings


def test_identity_names_are_the_operators_own() -> None:
    assert handlers.IDENTITY.finalizer == "netbox-device.capfleet.dev/finalizer"
    assert handlers.IDENTITY.peering_name == "capfleet-netbox-device"


def test_settings_keep_their_variable_names_and_defaults() -> None:
    assert NetboxSettings.load({}) == NetboxSettings("", 60.0, 1.0)  # "": derived from the cluster
    loaded = NetboxSettings.load(
        {
            "CAPFLEET_INSTANCE_NAME": "mgmt-a",
            "CAPFLEET_NETBOX_POLL_SECONDS": "1",
            "CAPFLEET_NETBOX_SETTLE_SECONDS": "0.2",
        }
    )
    assert loaded == NetboxSettings("mgmt-a", 1.0, 0.2)
