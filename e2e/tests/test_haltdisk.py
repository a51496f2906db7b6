"""The scale lab's VM disk: a boot sector SeaBIOS boots (its signature) that halts the CPU at once."""

from __future__ import annotations

from capfleet_e2e.libvirt.haltdisk import BOOT_SIGNATURE, HALT, SECTOR, SIZE, halting_disk


def test_the_disk_boots_into_cli_hlt_and_is_whole_sectors() -> None:
    disk = halting_disk()
    assert len(disk) == SIZE
    assert SIZE % SECTOR == 0
    assert disk[:2] == bytes([0xFA, 0xF4])  # cli; hlt
    assert disk[: len(HALT)] == HALT
    assert disk[SECTOR - 2 : SECTOR] == BOOT_SIGNATURE
    assert not any(disk[SECTOR:])
