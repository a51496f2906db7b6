"""Entry point: `python -m baremetal_provision` starts the baremetal-provision operator, as its container
image does.
"""

from baremetal_provision import handlers
from baremetal_provision.settings import BaremetalSettings
from capfleet import runtime


def main() -> None:
    runtime.run(handlers.IDENTITY, BaremetalSettings, connected=handlers.load_token_key)


if __name__ == "__main__":
    main()
