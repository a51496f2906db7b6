"""A tiny bootable Linux for test VMs, built at test time from Debian packages and cached.

Test VMs must really boot and really read their NoCloud seed, but a cloud image is far too slow under TCG
and cannot be downloaded here. So: the installed Debian kernel (linux-image-amd64, /boot/vmlinuz-<v>) and
an initramfs made of busybox-static, the few kernel modules that kernel has as modules (virtio, ATA/SCSI
CD-ROM, iso9660, with their dependencies from modules.dep) and an /init (guest_init.sh) that mounts the
NoCloud seed (the block device holding meta-data: a `cidata` ISO on CD-ROM or disk), prints user-data,
meta-data and network-config to the serial console between markers (base64 too, for exact comparison),
optionally POSTs them to a callback URL over QEMU user-mode networking,
and either powers off or idles like a real machine. The pair is cached under
$CAPFLEET_CACHE/testimage/<hash>/ (default ~/.cache/capfleet), so it is built once per machine.
bootdisk.py turns the pair into a bootable disk for domains that boot from a volume.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from capfleet_e2e.kubebin import cache_root
from capfleet_images.cpio import CpioWriter
from capfleet_images.hostkernel import find_kernel, module_files, module_name

BUSYBOX = Path("/bin/busybox")
# Loaded in this order (each after its dependencies); built-in ones are skipped.
MODULES = (
    "virtio_pci", "virtio_blk", "virtio_net", "virtio_scsi",
    "ata_piix", "ahci", "sr_mod", "isofs",
)  # fmt: skip
# Kernel command line for direct kernel boot and for the boot disk's bootloader.
CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"
BEGIN = "=== capfleet-testimage begin {name} ==="
END = "=== capfleet-testimage end {name} ==="
SEED_FILES = ("user-data", "meta-data", "network-config")


class ImageError(RuntimeError):
    """The test image cannot be built (busybox-static or a boot-disk tool missing, ...; no Debian kernel is
    capfleet_images.hostkernel.KernelError)."""


@dataclass(frozen=True)
class TestImage:
    """A kernel and its initramfs, ready for `<kernel>`/`<initrd>` in domain XML (or bootdisk.py)."""

    __test__ = False  # not a pytest test class

    kernel: Path
    initrd: Path
    kernel_version: str
    cmdline: str = CMDLINE


def _guest_init() -> str:
    return resources.files("capfleet_e2e.libvirt").joinpath("guest_init.sh").read_text()


def _cache_key(kernel: Path, modules: list[Path], init: str) -> str:
    digest = hashlib.sha256()
    for path in (kernel, BUSYBOX, *modules):
        st = path.stat()
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    digest.update(init.encode())
    return digest.hexdigest()[:16]


def build_initrd(modules: list[Path], out: Path, init: str | None = None) -> None:
    """Write a gzip-compressed newc initramfs: busybox, the modules (in `modules/order`) and /init
    (guest_init.sh unless another script is given)."""
    if not BUSYBOX.is_file():
        raise ImageError(f"{BUSYBOX} is missing (install busybox-static)")
    with gzip.open(out, "wb", compresslevel=6) as stream:
        cpio = CpioWriter(stream)
        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "mnt", "tmp", "modules"):
            cpio.directory(d)
        cpio.char_device("dev/console", 5, 1)
        cpio.file("bin/busybox", BUSYBOX.read_bytes(), 0o755)
        cpio.symlink("bin/sh", "busybox")
        cpio.file("init", (init if init is not None else _guest_init()).encode(), 0o755)
        order = []
        for path in modules:
            name = module_name(path.name)
            cpio.file(f"modules/{name}.ko", path.read_bytes(), 0o644)
            order.append(name)
        cpio.file("modules/order", ("\n".join(order) + "\n").encode(), 0o644)
        cpio.trailer()


def ensure_test_image(cache: Path | None = None, init: str | None = None) -> TestImage:
    """The cached kernel + initramfs, built now if this machine has not built them yet.

    `init` replaces guest_init.sh as /init (a variant such as the network-booting one of
    capfleet_e2e.baremetal); each variant is cached under its own key."""
    kernel, version = find_kernel()
    modules = module_files(version, MODULES)
    init_text = init if init is not None else _guest_init()
    target = (cache or cache_root() / "testimage") / _cache_key(kernel, modules, init_text)
    if not (target / "initrd.img").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            shutil.copyfile(kernel, work / "vmlinuz")
            build_initrd(modules, work / "initrd.img", init_text)
            try:
                os.rename(work, target)
            except OSError:  # built meanwhile by another process
                if not (target / "initrd.img").is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return TestImage(kernel=target / "vmlinuz", initrd=target / "initrd.img", kernel_version=version)


def seed_from_serial(log: str) -> dict[str, bytes]:
    """The seed files the guest printed (exactly, from their base64 blocks), by name."""
    text = log.replace("\r", "")
    found: dict[str, bytes] = {}
    for name in SEED_FILES:
        begin, end = BEGIN.format(name=f"{name} base64"), END.format(name=f"{name} base64")
        match = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), text, re.S)
        if match:
            found[name] = base64.b64decode("".join(match.group(1).split()))
    return found
