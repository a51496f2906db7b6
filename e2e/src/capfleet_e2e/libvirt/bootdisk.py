"""The test image as a bootable disk, for domains that boot from a volume (as the operator's VMs do).

The libvirt-vm operator clones a VM's root disk from a base image volume and boots it with SeaBIOS, so its
tests need a disk that boots the test image. An unpartitioned FAT disk ("superfloppy") with SYSLINUX in its
boot sector does that with Debian packages only (dosfstools, syslinux, mtools), no loop devices and no root:
SeaBIOS runs the boot sector, SYSLINUX loads vmlinuz and initrd.img with image.CMDLINE. Cached next to the
image it is made from.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from capfleet_e2e.libvirt.image import ImageError, TestImage

SIZE_MIB = 32


def _run(*argv: str) -> None:
    tool = shutil.which(argv[0]) or (
        f"/usr/sbin/{argv[0]}" if os.access(f"/usr/sbin/{argv[0]}", os.X_OK) else None
    )
    if tool is None:
        raise ImageError(f"{argv[0]} is missing (install dosfstools, syslinux and mtools)")
    result = subprocess.run([tool, *argv[1:]], capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise ImageError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")


def boot_disk(image: TestImage, fmt: str = "raw") -> Path:
    """A raw (or, with fmt="qcow2", qcow2) disk image that boots `image`; built once and cached."""
    target = image.initrd.parent / f"disk.{fmt}"
    if target.is_file():
        return target
    work = Path(tempfile.mkdtemp(prefix=".disk-", dir=target.parent))
    try:
        raw = work / "disk.raw"
        _run("mkfs.fat", "-C", "-n", "CFTESTBOOT", str(raw), str(SIZE_MIB * 1024))
        _run("syslinux", "--install", str(raw))
        config = work / "syslinux.cfg"
        config.write_text(
            f"DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n  KERNEL vmlinuz\n"
            f"  INITRD initrd.img\n  APPEND {image.cmdline}\n"
        )
        env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
        for path in (image.kernel, image.initrd, config):
            result = subprocess.run(
                ["mcopy", "-i", str(raw), str(path), f"::{path.name}"],
                capture_output=True, text=True, check=False, env=env, timeout=120,
            )  # fmt: skip
            if result.returncode != 0:
                raise ImageError(f"mcopy {path.name} failed: {result.stderr.strip()}")
        if fmt == "raw":
            built = raw
        else:
            built = work / f"disk.{fmt}"
            _run("qemu-img", "convert", "-f", "raw", "-O", fmt, str(raw), str(built))
        os.replace(built, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
