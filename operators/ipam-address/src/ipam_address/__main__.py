"""Entry point: `python -m ipam_address` starts the ipam-address operator, as its container image does."""

from capfleet import runtime
from ipam_address import handlers
from ipam_address.settings import IpamSettings


def main() -> None:
    runtime.run(handlers.IDENTITY, IpamSettings, connected=handlers.start_engines)


if __name__ == "__main__":
    main()
