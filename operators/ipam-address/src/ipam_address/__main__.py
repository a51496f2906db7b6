"""Entry point: `python -m ipam_address` starts the ipam-address operator, as its container image does."""

from capfleet import reconciling, runtime
from ipam_address import handlers


def main() -> None:
    runtime.run(handlers.IDENTITY, reconciling.Settings)  # ipam-address has no settings of its own


if __name__ == "__main__":
    main()
