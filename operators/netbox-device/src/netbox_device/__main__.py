"""Entry point: `python -m netbox_device` starts the netbox-device operator, as its container image does."""

from capfleet import runtime
from netbox_device import handlers
from netbox_device.settings import NetboxSettings


def main() -> None:
    runtime.run(handlers.IDENTITY, NetboxSettings, connected=handlers.start_engines)


if __name__ == "__main__":
    main()
