"""The node image's root file system: Debian bookworm from mmdebstrap, then made into a Kubernetes node.

mmdebstrap builds the tree from Debian packages as root (apt's own mirrors: deb.debian.org with
bookworm-updates and -security), with the kernel and its initramfs so the disk boots itself. `customise`
then writes capfleet's files (rootfiles.py: pure content), installs kubelet/kubeadm/kubectl and the
image tars to preload, and strips what must differ per machine (machine-id, SSH host keys, hostname).
All writes stay inside the tree: symlinks on the way are resolved as if the tree were `/`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from capfleet_images.nodeimage import rootfiles
from capfleet_images.nodeimage.versions import NodeImageVersions

SUITE = "bookworm"
PACKAGES = (
    # boot: init, devices, the kernel with its initramfs (zstd compresses it), growing the root on 1st boot
    "systemd-sysv", "udev", "kmod", "dbus", "linux-image-amd64", "initramfs-tools", "zstd",
    "cloud-init", "cloud-guest-utils", "e2fsprogs", "util-linux", "mount", "procps", "less",
    # network: cloud-init renders ENI for ifupdown; resolvconf applies its dns-nameservers, and its
    # routes (the default route too) are `post-up route add ...`: net-tools' route
    "iproute2", "ifupdown", "isc-dhcp-client", "resolvconf", "net-tools", "ca-certificates",
    # kubeadm's node: container runtime, CNI plugins (/usr/lib/cni) and its preflight tools
    "containerd", "runc", "containernetworking-plugins", "conntrack", "ethtool", "socat",
    "iptables", "ebtables",
)  # fmt: skip
# No manuals, translations or documentation on a node (copyright notices stay).
DPKG_PATHS = (
    "exclude=/usr/share/man/*", "exclude=/usr/share/info/*",
    "exclude=/usr/share/locale/*", "include=/usr/share/locale/locale.alias",
    "exclude=/usr/share/doc/*", "include=/usr/share/doc/*/copyright",
)  # fmt: skip
MMDEBSTRAP_TIMEOUT = 1800


class RootfsError(RuntimeError):
    """The root file system cannot be built or customised."""


def mmdebstrap_argv(target: Path, packages: Sequence[str] = PACKAGES) -> list[str]:
    """mmdebstrap's command line for a minbase bookworm tree with `packages`, into directory `target`."""
    return [
        "mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory",
        f"--include={','.join(packages)}",
        *(f"--dpkgopt=path-{rule}" for rule in DPKG_PATHS),
        # Nothing of the build host may leak into the image (rootfiles.py links resolv.conf).
        '--customize-hook=rm -f "$1/etc/hostname" "$1/etc/resolv.conf"',
        SUITE, str(target),
    ]  # fmt: skip


def debootstrap(target: Path, packages: Sequence[str] = PACKAGES, log: Path | None = None) -> None:
    """Build the Debian tree into `target` (must not exist yet, or be empty); needs root."""
    if os.geteuid() != 0:
        raise RootfsError("mmdebstrap --mode=root needs root")
    out = log.open("wb") if log else None
    try:
        result = subprocess.run(
            mmdebstrap_argv(target, packages), stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT,
            check=False, timeout=MMDEBSTRAP_TIMEOUT,
        )  # fmt: skip
    finally:
        if out:
            out.close()
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else (result.stdout or b"").decode()[-3000:]
        raise RootfsError(f"mmdebstrap failed ({result.returncode}):\n{tail}")


def inside(root: Path, path: str) -> Path:
    """`path` (absolute, as seen from within `root`) on the host, following symlinks as a chroot would.

    The last component is not followed (so a symlink there can be replaced, not written through).
    """
    current, parts, hops = root, [p for p in path.split("/") if p], 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if parts and candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise RootfsError(f"too many symlinks resolving {path} in {root}")
            target = os.readlink(candidate)
            current = root if target.startswith("/") else current
            parts = [p for p in target.split("/") if p] + parts
            continue
        current = candidate
    return current


def write_files(
    root: Path, files: Mapping[str, tuple[bytes, int]], links: Mapping[str, str] | None = None
) -> None:
    """Write `files` ({absolute path: (content, mode)}) and `links` ({path: target}) into the tree."""
    for path, (content, mode) in files.items():
        host = inside(root, path)
        host.parent.mkdir(parents=True, exist_ok=True)
        if host.is_symlink():
            host.unlink()
        host.write_bytes(content)
        host.chmod(mode)
    for path, target in (links or {}).items():
        host = inside(root, path)
        host.parent.mkdir(parents=True, exist_ok=True)
        if host.is_symlink() or host.exists():
            host.unlink()
        host.symlink_to(target)


def customise(
    root: Path,
    kube_binaries: Mapping[str, Path],
    image_tars: Sequence[Path],
    versions: NodeImageVersions | None = None,
) -> None:
    """Make the Debian tree a node: capfleet's files, kubelet/kubeadm/kubectl, the images to preload."""
    missing = [b for b in ("kubelet", "kubeadm", "kubectl") if b not in kube_binaries]
    if missing:
        raise RootfsError(f"kube binaries missing: {', '.join(missing)}")
    files = rootfiles.node_files(versions or NodeImageVersions())
    for name, source in kube_binaries.items():
        files[f"/usr/bin/{name}"] = (source.read_bytes(), 0o755)
    write_files(root, files, rootfiles.node_links())
    images = inside(root, rootfiles.IMAGES_DIR)
    if images.exists():
        shutil.rmtree(images)
    images.mkdir(parents=True)
    for tar in image_tars:
        if not tar.name.endswith(".tar"):
            raise RootfsError(f"image archives must be named *.tar: {tar}")
        shutil.copyfile(tar, images / tar.name)
        (images / tar.name).chmod(0o644)
    _make_unique_per_machine(root)


def _make_unique_per_machine(root: Path) -> None:
    """What every clone must generate for itself: machine-id (empty: systemd makes one), SSH host keys."""
    write_files(root, {"/etc/machine-id": (b"", 0o444)})
    dbus_id = inside(root, "/var/lib/dbus/machine-id")
    if dbus_id.is_symlink() or dbus_id.exists():
        dbus_id.unlink()
    for key in inside(root, "/etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for stale in ("/etc/hostname", "/var/lib/cloud"):
        host = inside(root, stale)
        if host.is_dir() and not host.is_symlink():
            shutil.rmtree(host)
        elif host.is_symlink() or host.exists():
            host.unlink()


def kernel_files(root: Path) -> tuple[Path, Path]:
    """The newest kernel in the tree's /boot and its initrd (vmlinuz-<v>, initrd.img-<v>)."""
    boot = inside(root, "/boot")
    kernels = sorted(boot.glob("vmlinuz-*"), key=lambda p: _version_key(p.name.removeprefix("vmlinuz-")))
    if not kernels:
        raise RootfsError(f"no kernel in {boot} (is linux-image-amd64 installed?)")
    kernel = kernels[-1]
    initrd = boot / f"initrd.img-{kernel.name.removeprefix('vmlinuz-')}"
    if not initrd.is_file():
        raise RootfsError(f"no initrd for {kernel.name} in {boot} (is initramfs-tools installed?)")
    return kernel, initrd


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in "".join(c if c.isdigit() else " " for c in version).split())
