"""Entry point: `python -m libvirt_vm` starts the libvirt-vm operator, as its container image does."""

from capfleet import runtime
from libvirt_vm import handlers
from libvirt_vm.settings import LibvirtSettings


def main() -> None:
    runtime.run(handlers.IDENTITY, LibvirtSettings, register=handlers.register_polls)


if __name__ == "__main__":
    main()
