"""A disk whose boot sector halts the CPU: the cheapest guest a real QEMU domain can run, for the scale lab.

`make bench-fleet` puts hundreds of VM workers on one test hypervisor. They must be real libvirt domains
(libvirt-vm clones their disks, uploads their NoCloud seeds, defines and starts them over SSH, unchanged),
but libvirt's test driver cannot take a volume upload, and a guest that boots an OS costs seconds of TCG
CPU each. SeaBIOS runs this disk's boot sector, whose first instructions are `cli; hlt`: the virtual CPU
stops with interrupts off, QEMU's TCG thread sleeps, and the domain stays running. Measured here: about
45 MiB resident and under a second of CPU per QEMU process.
"""

from __future__ import annotations

SECTOR = 512
SIZE = 1 << 20
"""The whole disk (zeros after the boot sector): a size every tool takes as a raw image."""

HALT = bytes([0xFA, 0xF4, 0xEB, 0xFD])
"""cli; hlt; jmp back to the hlt (a non-maskable interrupt could wake the CPU)."""

BOOT_SIGNATURE = b"\x55\xaa"
"""What makes SeaBIOS boot a sector: its last two bytes."""


def halting_disk() -> bytes:
    """A raw disk image of SIZE bytes whose boot sector halts."""
    sector = HALT + bytes(SECTOR - len(HALT) - len(BOOT_SIGNATURE)) + BOOT_SIGNATURE
    return sector + bytes(SIZE - SECTOR)
