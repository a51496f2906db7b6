"""The network-booted variant of the test image: the same Debian kernel and busybox initramfs as
capfleet_e2e.libvirt.image, with netboot_init.sh as /init, so an iPXE script can boot it over HTTP and it
fetches its NoCloud seed over HTTP (`ds=nocloud-net;s=<url>/`) instead of from a block device."""

from __future__ import annotations

from importlib import resources

from capfleet_e2e.libvirt.image import TestImage, ensure_test_image

# Serial console first (the file the test reads), quiet; the seed and callback arguments are added per boot.
NETBOOT_CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"


def netboot_init() -> str:
    return resources.files("capfleet_e2e.baremetal").joinpath("netboot_init.sh").read_text()


def ensure_netboot_image() -> TestImage:
    """Kernel + initramfs for network boot (built once per machine, then cached)."""
    image = ensure_test_image(init=netboot_init())
    return TestImage(image.kernel, image.initrd, image.kernel_version, NETBOOT_CMDLINE)
