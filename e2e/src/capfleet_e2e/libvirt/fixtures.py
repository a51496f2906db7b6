"""pytest fixtures for libvirt tests: two test hypervisors and the test image, once per session.

Imported by `capfleet_e2e.plugin`, so every test in the workspace (the libvirt-vm operator's included)
can request them; nothing starts unless a test asks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from capfleet_e2e.libvirt.hypervisor import Hypervisor, start_hypervisor
from capfleet_e2e.libvirt.image import TestImage, ensure_test_image

HYPERVISOR_NAMES = ("hv-a", "hv-b")
POOL_SIZE_MIB = 2048


@pytest.fixture(scope="session")
def hypervisors() -> Iterator[list[Hypervisor]]:
    """Two isolated libvirtd instances, each behind its own sshd, with a 2 GiB `default` dir pool."""
    started: list[Hypervisor] = []
    try:
        for name in HYPERVISOR_NAMES:
            started.append(start_hypervisor(name, f"fd-{name}", pool_size_mib=POOL_SIZE_MIB))
        yield started
    finally:
        for hypervisor in started:
            hypervisor.stop()


@pytest.fixture(scope="session")
def test_image() -> TestImage:
    """The Debian kernel + busybox initramfs (built once per machine, then cached)."""
    return ensure_test_image()
