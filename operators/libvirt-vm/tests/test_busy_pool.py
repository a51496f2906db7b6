"""A storage pool busy building volumes (a burst of VMs' disks) refuses to be refreshed, with libvirt's
generic internal error; reading the host's facts and removing a VM's volumes go on with what the pool
last read. Any other refusal still fails the call."""

from __future__ import annotations

import libvirt
import pytest

from libvirt_vm.backends import hosts


class Pool:
    def __init__(self, refusal: str | None) -> None:
        self.refusal = refusal

    def refresh(self, _flags: int) -> None:
        if self.refusal is not None:
            raise libvirt.libvirtError(self.refusal)


def test_a_pool_busy_with_builds_keeps_its_last_reading() -> None:
    hosts.refresh_pool(Pool("internal error: pool 'default' has asynchronous jobs running."))
    hosts.refresh_pool(Pool(None))


def test_any_other_refusal_to_refresh_fails() -> None:
    with pytest.raises(libvirt.libvirtError, match="cannot open directory"):
        hosts.refresh_pool(Pool("cannot open directory '/var/lib/libvirt/images'"))
