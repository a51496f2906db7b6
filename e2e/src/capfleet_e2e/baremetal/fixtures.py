"""pytest fixtures for bare-metal tests: the PXE lab (once per session) and servers in it (per test).

Imported by `capfleet_e2e.plugin`; nothing starts unless a test asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.netboot import ensure_netboot_image
from capfleet_e2e.baremetal.servers import DEFAULT_SHAPE, BareMetalServer, Shape
from capfleet_e2e.libvirt.image import TestImage
from capfleet_images.deployramdisk.build import DeployRamdisk, ensure_deploy_ramdisk


@pytest.fixture(scope="session")
def pxe_lab() -> Iterator[PxeLab]:
    """A private PXE network with dnsmasq, a libvirtd for its servers and a Redfish emulator over them."""
    with PxeLab() as lab:
        yield lab


@pytest.fixture
def baremetal_servers(pxe_lab: PxeLab) -> Iterator[Callable[[int], list[BareMetalServer]]]:
    """`baremetal_servers(n[, shape])`: n new powered-off servers in the lab, removed after the test."""
    made: list[BareMetalServer] = []

    def make(count: int = 1, shape: Shape = DEFAULT_SHAPE) -> list[BareMetalServer]:
        servers = pxe_lab.define_servers(count, shape=shape)
        made.extend(servers)
        return servers

    yield make
    pxe_lab.remove_servers(made)


@pytest.fixture(scope="session")
def netboot_image() -> TestImage:
    """The test image whose /init fetches its NoCloud seed over HTTP (for iPXE to boot)."""
    return ensure_netboot_image()


@pytest.fixture(scope="session")
def deploy_ramdisk() -> DeployRamdisk:
    """capfleet's deploy ramdisk (built once per machine, then cached)."""
    return ensure_deploy_ramdisk()
