"""The node image as the labs boot it: guests under QEMU's TCG need two more kernel arguments.

Why: under TCG, every guest of two vCPUs in the HA suite's consoles failed the kernel's TSC synchronisation
check ("tsc: Marking TSC unstable due to TSCs unsynchronized") and kept time with the HPET, while every
one-vCPU guest used the TSC. The HPET is an emulated device: each clock read, which Go programs (etcd, the
API server, the kubelet) make all the time, becomes a system call and a trip through QEMU's device model.
`tsc=reliable` skips the check; `mitigations=off` drops speculative-execution workarounds that an emulated
CPU only pays for. Both are for throw-away lab guests only: the image users build and write to real disks
keeps its command line.

The variant is a copy of the cached image whose boot partition's syslinux.cfg differs, made once per
image and these arguments, beside the image it comes from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from capfleet_e2e.kubebin import cache_lock
from capfleet_images.nodeimage.build import NodeImage
from capfleet_images.nodeimage.disk import ALIGN_SECTORS, SECTOR, syslinux_cfg
from capfleet_images.nodeimage.rootfiles import KERNEL_CMDLINE

TCG_KERNEL_ARGS = "tsc=reliable mitigations=off"


def lab_cmdline(extra: str = TCG_KERNEL_ARGS) -> str:
    return f"{KERNEL_CMDLINE} {extra}"


def lab_qcow2(image: NodeImage, extra: str = TCG_KERNEL_ARGS) -> Path:
    """`image` for the labs' VMs (qcow2), its kernel command line extended by `extra`; made if missing."""
    digest = hashlib.sha256(extra.encode()).hexdigest()[:8]
    out = image.directory / f"disk-lab-{digest}.qcow2"
    with cache_lock(out.with_suffix(".lock")):
        if not out.is_file():
            with_kernel_args(image.raw, out, lab_cmdline(extra), image.directory / f"work-lab-{digest}")
    return out


def with_kernel_args(raw: Path, qcow2: Path, cmdline: str, workdir: Path) -> None:
    """Write `qcow2`: disk `raw` booting with kernel command line `cmdline`. Only syslinux.cfg on the
    boot partition (partition 1, at 1 MiB) changes, in a sparse copy of `raw` removed after."""
    workdir.mkdir(parents=True, exist_ok=True)
    copy, config, part = workdir / "disk.raw", workdir / "syslinux.cfg", workdir / "disk.qcow2"
    try:
        run("cp", "--sparse=always", str(raw), str(copy))
        config.write_text(syslinux_cfg(cmdline))
        env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
        run("mcopy", "-o", "-i", f"{copy}@@{ALIGN_SECTORS * SECTOR}", str(config), "::syslinux.cfg", env=env)
        run("qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(copy), str(part))
        part.rename(qcow2)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(*argv: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
