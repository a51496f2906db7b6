"""Building capfleet's deploy ramdisk once per machine, from the host's Debian packages, and caching it.

A bare-metal server network-boots this kernel and initramfs to get its operating system written to disk
(deploy_init.sh says what it does). Like the test harness's test image, it is the host's
Debian kernel with the modules a server's disks and NIC need, busybox-static, and an /init script; unlike
it, it also carries real programs with their shared libraries (found by `ldd`, copied with their
symlinks): qemu-img (qcow2 to raw), sfdisk (the seed partition, GPT too), wipefs (cleaning), mkfs.fat
(the seed's FAT file system, which the kernel's vfat then mounts), and openssl with Debian's CA bundle,
through which busybox wget fetches https:// URLs (verifying the server). The pair lands in
$CAPFLEET_CACHE/deploy-ramdisk/<recipe digest>/{vmlinuz,initrd.img} (default ~/.cache/capfleet); the digest
covers this package's files and the identity of every host file taken, so changing either builds anew.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from capfleet_images.cache import cache_lock, cache_root
from capfleet_images.cpio import CpioWriter
from capfleet_images.hostkernel import find_kernel, module_files
from capfleet_images.nodeimage.iptables import copy_path

BUSYBOX = "/usr/bin/busybox"
# Program → the Debian package that ships it (named in the error when missing).
PROGRAMS = {
    "/usr/bin/qemu-img": "qemu-utils",
    "/usr/sbin/sfdisk": "fdisk",
    "/usr/sbin/wipefs": "util-linux",
    "/usr/sbin/mkfs.fat": "dosfstools",
    "/usr/bin/openssl": "openssl",
}
# busybox wget fetches https:// URLs through `openssl s_client`, which verifies the server against these.
TLS_FILES = {"/usr/lib/ssl/cert.pem": "ca-certificates", "/usr/lib/ssl/openssl.cnf": "openssl"}
# busybox-static resolves host names through glibc's NSS, which it loads at run time.
NSS_LIBRARIES = ("/usr/lib/x86_64-linux-gnu/libnss_files.so.2", "/usr/lib/x86_64-linux-gnu/libnss_dns.so.2")
# Loaded in this order, each after its dependencies; the ones this kernel lacks or has built in are skipped.
MODULES = (
    "virtio_pci", "virtio_blk", "virtio_net", "virtio_scsi",
    "crc64_rocksoft_generic", "crct10dif_generic", "sd_mod", "ahci", "ata_piix", "nvme",
    "e1000", "fat", "vfat", "nls_cp437", "nls_iso8859_1",
)  # fmt: skip
SCRIPTS = ("deploy_init.sh", "deploy_lib.sh")
PACKAGE_DIR = Path(__file__).parent
RECIPE = (PACKAGE_DIR, PACKAGE_DIR.parent / "cpio.py")
BUILD_RECORD = "build.json"
ETC_FILES = {
    "etc/nsswitch.conf": "hosts: files dns\n",
    "etc/hosts": "127.0.0.1 localhost\n",
    "etc/resolv.conf": "",
}
MERGED_USR = ("/bin", "/sbin", "/lib", "/lib64")


class RamdiskError(RuntimeError):
    """The deploy ramdisk cannot be built (a Debian package missing, ...)."""


@dataclass(frozen=True)
class DeployRamdisk:
    """The built pair: `kernel` and `initrd` for iPXE's `kernel`/`initrd` or QEMU's -kernel/-initrd."""

    directory: Path

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    @property
    def record(self) -> dict[str, object]:
        """What the build recorded: kernel version, modules, programs, sizes, seconds."""
        loaded: dict[str, object] = json.loads((self.directory / BUILD_RECORD).read_text())
        return loaded


def shared_libraries(program: str) -> list[str]:
    """The shared libraries `program` (on this host) loads, as `ldd` lists them."""
    result = subprocess.run(["ldd", program], capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0 or "not found" in result.stdout:
        raise RamdiskError(f"ldd {program} failed: {result.stderr.strip() or result.stdout.strip()}")
    return re.findall(r"(?:=> )?(/\S+) \(0x", result.stdout)


def host_files() -> list[str]:
    """Every host file the initramfs takes besides the kernel modules: busybox, the programs, libraries."""
    missing = [f"{p} ({pkg})" for p, pkg in {**PROGRAMS, **TLS_FILES}.items() if not Path(p).is_file()]
    if not Path(BUSYBOX).is_file():
        missing.append(f"{BUSYBOX} (busybox-static)")
    if missing:
        raise RamdiskError(f"missing: {', '.join(missing)}; install those Debian packages")
    files = {BUSYBOX, *PROGRAMS, *TLS_FILES, *(p for p in NSS_LIBRARIES if Path(p).is_file())}
    for program in PROGRAMS:
        files.update(shared_libraries(program))
    return sorted(files)


def available_modules(version: str, names: Sequence[str] = MODULES) -> tuple[str, ...]:
    """`names` that kernel `version` has as loadable modules (spelled with `_`, as modules.dep's are)."""
    dep = (Path("/lib/modules") / version / "modules.dep").read_text()
    present = {
        Path(line.partition(":")[0]).name.split(".ko")[0].replace("-", "_") for line in dep.splitlines()
    }
    return tuple(n for n in names if n in present)


def recipe_digest(recipe: Sequence[Path], inputs: Sequence[Path]) -> str:
    """A short digest of the recipe's files (contents) and of the host inputs (path, size, mtime)."""
    digest = hashlib.sha256()
    for entry in recipe:
        files = sorted(p for p in entry.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for file in files if entry.is_dir() else [entry]:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    for path in inputs:
        st = path.stat()
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


def stage(tree: Path, files: Sequence[str], modules: Sequence[Path]) -> None:
    """Lay out the initramfs in directory `tree`: the host files at their paths (merged /usr symlinks
    too), /bin/sh, /etc, /init and its functions, the modules with their load order."""
    for path in (*(d for d in MERGED_USR if Path(d).is_symlink()), *files):
        copy_path(Path("/"), tree, path)
    (tree / "usr/bin/sh").symlink_to("busybox")
    for d in ("proc", "sys", "dev", "tmp", "modules", "lib/capfleet"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for name, content in ETC_FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(content)
    (tree / "init").write_bytes((PACKAGE_DIR / "deploy_init.sh").read_bytes())
    (tree / "init").chmod(0o755)
    shutil.copyfile(PACKAGE_DIR / "deploy_lib.sh", tree / "lib/capfleet/deploy_lib.sh")
    order = []
    for module in modules:
        name = module.name.split(".ko")[0].replace("-", "_")
        shutil.copyfile(module, tree / "modules" / f"{name}.ko")
        order.append(name)
    (tree / "modules/order").write_text("\n".join(order) + "\n")


def write_initramfs(tree: Path, out: Path) -> None:
    """Write `tree` as a gzip-compressed newc cpio archive, entries sorted, parents first, plus
    /dev/console (a device node needs no root as an archive entry)."""
    with gzip.open(out, "wb", compresslevel=6) as stream:
        cpio = CpioWriter(stream)
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames.sort()
            base = Path(dirpath)
            for name in sorted(dirnames + filenames):
                path = base / name
                rel = str(path.relative_to(tree))
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode):
                    cpio.symlink(rel, os.readlink(path))
                elif stat.S_ISDIR(st.st_mode):
                    cpio.directory(rel)
                else:
                    cpio.file(rel, path.read_bytes(), stat.S_IMODE(st.st_mode))
            if base == tree:
                cpio.char_device("dev/console", 5, 1)
        cpio.trailer()


def ensure_deploy_ramdisk(
    cache: Path | None = None, progress: Callable[[str], None] = lambda _: None
) -> DeployRamdisk:
    """The cached deploy ramdisk for this host's packages and this recipe, built first if missing."""
    kernel, version = find_kernel()
    modules = module_files(version, available_modules(version))
    files = host_files()
    digest = recipe_digest(RECIPE, [kernel, *map(Path, files), *modules])
    ramdisk = DeployRamdisk((cache or cache_root() / "deploy-ramdisk") / digest)
    with cache_lock(ramdisk.directory.with_suffix(".lock")):
        if ramdisk.initrd.is_file():
            return ramdisk
        progress(f"Building the deploy ramdisk into {ramdisk.directory} ...")
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=ramdisk.directory.parent))
        try:
            out = work / "out"
            out.mkdir()
            stage(work / "tree", files, modules)
            write_initramfs(work / "tree", out / "initrd.img")
            shutil.copyfile(kernel, out / "vmlinuz")
            record = {
                "kernel_version": version,
                "modules": [m.name for m in modules],
                "files": files,
                "initrd_bytes": (out / "initrd.img").stat().st_size,
                "kernel_bytes": (out / "vmlinuz").stat().st_size,
                "seconds": round(time.monotonic() - started, 1),
            }
            (out / BUILD_RECORD).write_text(json.dumps(record, indent=1) + "\n")
            out.rename(ramdisk.directory)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return ramdisk
