"""The node image's root file system as a bootable disk, made without loop devices, mounts or root.

BIOS boot, as the operator's VMs (SeaBIOS, machine `pc`) and most bare-metal servers can do: an MBR (written
here, with SYSLINUX's MBR boot code) whose active partition 1 is a FAT32 boot partition holding SYSLINUX,
the tree's kernel and initrd; partition 2, last so that cloud-init's growpart can grow it to the disk's
end, is the ext4 root file system labelled `rootfs`, filled from the tree by `mkfs.ext4 -d`. Each
partition is made in a file of its own (mkfs.fat -C, syslinux --install, mcopy) and copied into disk.raw
at its offset, holes kept; qemu-img makes disk.qcow2 from it (VM base volume), disk.raw is for bare metal.
"""

from __future__ import annotations

import math
import os
import shutil
import stat
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from capfleet_images.nodeimage.rootfiles import KERNEL_CMDLINE, ROOT_LABEL
from capfleet_images.nodeimage.rootfs import RootfsError, kernel_files

SECTOR = 512
MIB = 1024 * 1024
ALIGN_SECTORS = MIB // SECTOR
BOOT_MIB = 256
HEADROOM = 1.3  # room left in the root file system before growpart/resize2fs grow it at first boot
FAT32_LBA, LINUX = 0x0C, 0x83
MBR_CODE = (Path("/usr/lib/syslinux/mbr/mbr.bin"), Path("/usr/lib/SYSLINUX/mbr.bin"))
DISK_ID = 0x43504654  # "TFPC": one per image; clones share it, as they share the file systems' UUIDs


@dataclass(frozen=True)
class Partition:
    start: int  # first sector (LBA)
    sectors: int
    type_id: int
    active: bool = False


def chs(lba: int) -> bytes:
    """The 3-byte CHS address of `lba` for a 255-head, 63-sector geometry (saturating past cylinder 1023)."""
    cylinder, rest = divmod(lba, 255 * 63)
    head, sector = divmod(rest, 63)
    if cylinder > 1023:
        cylinder, head, sector = 1023, 254, 62
    return bytes((head, ((cylinder >> 2) & 0xC0) | (sector + 1), cylinder & 0xFF))


def mbr(boot_code: bytes, partitions: list[Partition], disk_id: int = DISK_ID) -> bytes:
    """A master boot record: up to 440 bytes of code, disk signature, four partition entries, 0x55AA."""
    if len(boot_code) > 440 or len(partitions) > 4:
        raise ValueError("an MBR holds 440 bytes of code and 4 partitions")
    table = b""
    for part in partitions:
        table += (
            bytes((0x80 if part.active else 0x00,))
            + chs(part.start)
            + bytes((part.type_id,))
            + chs(part.start + part.sectors - 1)
            + struct.pack("<II", part.start, part.sectors)
        )
    table = table.ljust(64, b"\0")
    return boot_code.ljust(440, b"\0") + struct.pack("<IH", disk_id, 0) + table + b"\x55\xaa"


def syslinux_cfg(cmdline: str = KERNEL_CMDLINE) -> str:
    return (
        "DEFAULT capfleet\nPROMPT 0\nTIMEOUT 0\nLABEL capfleet\n"
        f"  KERNEL vmlinuz\n  INITRD initrd.img\n  APPEND {cmdline}\n"
    )


def layout(boot_sectors: int, root_sectors: int) -> list[Partition]:
    """Partition 1 (boot, active) at 1 MiB, partition 2 (root) right after it, both 1 MiB aligned."""
    boot = Partition(ALIGN_SECTORS, boot_sectors, FAT32_LBA, active=True)
    root_start = ALIGN_SECTORS * math.ceil((boot.start + boot.sectors) / ALIGN_SECTORS)
    return [boot, Partition(root_start, root_sectors, LINUX)]


def _run(*argv: str, env: dict[str, str] | None = None, timeout: int = 600) -> None:
    tool = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/sbin:/sbin")
    if tool is None:
        raise RootfsError(f"{argv[0]} is missing (needs dosfstools, syslinux, mtools, e2fsprogs, qemu-utils)")
    result = subprocess.run(
        [tool, *argv[1:]], capture_output=True, text=True, check=False, timeout=timeout, env=env
    )
    if result.returncode != 0:
        raise RootfsError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")


def boot_partition(tree: Path, out: Path, size_mib: int = BOOT_MIB, hidden: int = ALIGN_SECTORS) -> None:
    """FAT32 with SYSLINUX, the tree's newest kernel and initrd as vmlinuz and initrd.img, syslinux.cfg."""
    kernel, initrd = kernel_files(tree)
    out.unlink(missing_ok=True)
    # -h: the sectors before the partition, which SYSLINUX's boot sector adds to find its files.
    _run("mkfs.fat", "-C", "-F", "32", "-n", "BOOT", "-h", str(hidden), "-i", f"{DISK_ID:08x}",
         str(out), str(size_mib * 1024))  # fmt: skip
    _run("syslinux", "--install", str(out))
    config = out.with_name("syslinux.cfg")
    config.write_text(syslinux_cfg())
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    for source, name in ((kernel, "vmlinuz"), (initrd, "initrd.img"), (config, "syslinux.cfg")):
        _run("mcopy", "-i", str(out), str(source), f"::{name}", env=env)
    config.unlink()


def tree_bytes(tree: Path) -> int:
    """Bytes the tree takes in 4 KiB blocks (files, directories, long symlinks), not following symlinks."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        total += 4096 * (1 + len(dirnames))
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            fast_symlink = stat.S_ISLNK(st.st_mode) and st.st_size < 60  # kept in the inode itself
            total += 0 if fast_symlink else 4096 * math.ceil(st.st_size / 4096)
    return total


def root_partition(tree: Path, out: Path, headroom: float = HEADROOM) -> None:
    """ext4 labelled `rootfs` holding the tree: its contents plus headroom and 64 MiB for the journal."""
    size_mib = math.ceil((tree_bytes(tree) * headroom) / MIB) + 64
    out.unlink(missing_ok=True)
    _run("mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(tree), str(out), f"{size_mib}M", timeout=1800)


def _copy_sparse(source: Path, fd: int, offset: int) -> None:
    """Copy `source` into `fd` at `offset`, only its data extents (holes stay holes)."""
    with source.open("rb") as src:
        size, pos = os.fstat(src.fileno()).st_size, 0
        while pos < size:
            try:
                pos = os.lseek(src.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after pos
                break
            end = os.lseek(src.fileno(), pos, os.SEEK_HOLE)
            while pos < end:
                chunk = os.pread(src.fileno(), min(8 * MIB, end - pos), pos)
                os.pwrite(fd, chunk, offset + pos)
                pos += len(chunk)


def assemble(boot: Path, root: Path, out: Path, boot_code: bytes) -> list[Partition]:
    """Write disk image `out`: the MBR, then each partition file at its offset."""
    parts = layout(boot.stat().st_size // SECTOR, root.stat().st_size // SECTOR)
    end = parts[-1].start + parts[-1].sectors
    out.unlink(missing_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, end * SECTOR)
        os.pwrite(fd, mbr(boot_code, parts), 0)
        for part, source in zip(parts, (boot, root), strict=True):
            _copy_sparse(source, fd, part.start * SECTOR)
    finally:
        os.close(fd)
    return parts


def mbr_code() -> bytes:
    for path in MBR_CODE:
        if path.is_file():
            return path.read_bytes()[:440]
    raise RootfsError(f"SYSLINUX's MBR code is missing ({' or '.join(map(str, MBR_CODE))}: install syslinux)")


def build_disk(tree: Path, raw: Path, qcow2: Path, workdir: Path) -> list[Partition]:
    """Write `raw` and `qcow2`, both booting `tree` (a customised root file system); the partitions.

    The partition files are made in `workdir` (as big as the disk, but sparse) and removed after.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    boot, root = workdir / "boot.part", workdir / "root.part"
    try:
        boot_partition(tree, boot)
        root_partition(tree, root)
        parts = assemble(boot, root, raw, mbr_code())
    finally:
        boot.unlink(missing_ok=True)
        root.unlink(missing_ok=True)
    qcow2.unlink(missing_ok=True)
    _run("qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2), timeout=1800)
    return parts
