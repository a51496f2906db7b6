"""The iptables-nft and conntrack programs of the node's root file system, as a tree for kube-proxy's image.

kube-proxy runs iptables(-save/-restore) and conntrack inside its container, so its image needs those
programs and every shared library they load, and nothing else. They are taken from the very packages the
node itself runs (same versions as the host's netfilter tools): the files dpkg lists for the packages
below (programs, shared libraries, iptables' dlopen()ed extensions in xtables/), checked against `ldd`
run in the root file system. The commands are plain symlinks to xtables-nft-multi (no alternatives).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from capfleet_images.nodeimage.rootfs import RootfsError, inside

PACKAGES = (
    "iptables", "libxtables12", "libip4tc2", "libip6tc2", "libnftnl11", "libmnl0",
    "libnetfilter-conntrack3", "libnfnetlink0", "libc6", "conntrack",
)  # fmt: skip
PROGRAMS = ("/usr/sbin/xtables-nft-multi", "/usr/sbin/conntrack")
XTABLES_COMMANDS = tuple(
    f"{family}{flavour}{verb}"
    for family in ("iptables", "ip6tables")
    for flavour in ("", "-nft")
    for verb in ("", "-save", "-restore")
)
_SHARED_LIBRARY = re.compile(r"^/(usr/)?lib(64|x32)?/.*\.so(\.[0-9.]+)?$")
_LEFT_OUT = ("/gconv/", "/audit/")


def package_files(root: Path, package: str) -> list[str]:
    """The paths dpkg lists for an installed `package` in the tree (its .list file, as `dpkg -L` reads)."""
    info = inside(root, "/var/lib/dpkg/info")
    for name in (f"{package}:amd64.list", f"{package}.list"):
        if (info / name).is_file():
            return (info / name).read_text().splitlines()
    raise RootfsError(f"package {package} is not installed in {root}")


def wanted(path: str) -> bool:
    """Whether a packaged path belongs in the tree: the two programs and the shared libraries."""
    if path in PROGRAMS:
        return True
    return bool(_SHARED_LIBRARY.match(path)) and not any(part in path for part in _LEFT_OUT)


def copy_path(root: Path, dest: Path, path: str) -> None:
    """Copy `path` from tree `root` to tree `dest`, with the symlinks met on the way (and their targets)."""
    src, out = root, dest
    parts = [p for p in path.split("/") if p]
    while parts:
        part = parts.pop(0)
        src_next, out_next = src / part, out / part
        if src_next.is_symlink():
            target = os.readlink(src_next)
            if not out_next.is_symlink():
                out_next.parent.mkdir(parents=True, exist_ok=True)
                out_next.symlink_to(target)
            base = "" if target.startswith("/") else "/" + str(src.relative_to(root))
            if not parts:  # the path itself is a symlink: bring its target along
                copy_path(root, dest, os.path.normpath(f"{base}/{target}"))
                return
            resolved = os.path.normpath(f"{base}/{target}").strip("/")
            src, out = root, dest
            parts = [p for p in resolved.split("/") if p] + parts
            continue
        src, out = src_next, out_next
    if src.is_dir():
        out.mkdir(parents=True, exist_ok=True)
    elif src.is_file() and not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def ldd(root: Path, program: str) -> list[str]:
    """The shared libraries `program` loads, as `ldd` in the tree says (needs root: it chroots)."""
    result = subprocess.run(
        ["chroot", str(root), "ldd", program], capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise RootfsError(f"ldd {program} in {root} failed: {result.stderr.strip()}")
    return re.findall(r"(?:=> )?(/\S+) \(0x", result.stdout)


def iptables_tree(root: Path, dest: Path) -> list[str]:
    """Make `dest` a tree holding iptables-nft, ip6tables-nft, conntrack and their libraries; the paths."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    paths = sorted({p for package in PACKAGES for p in package_files(root, package) if wanted(p)})
    for program in PROGRAMS:
        if program not in paths:
            raise RootfsError(f"{program} is not in the packages {', '.join(PACKAGES)}")
    for path in ("/bin", "/sbin", "/lib", "/lib64", *paths):
        if path in paths or inside(root, path).is_symlink():  # merged /usr: /sbin -> usr/sbin, ...
            copy_path(root, dest, path)
    for program in PROGRAMS:
        for library in ldd(root, program):
            if not (dest / library.lstrip("/")).exists():
                copy_path(root, dest, library)
                paths.append(library)
    sbin = inside(dest, "/usr/sbin")
    for command in (*XTABLES_COMMANDS, "xtables-monitor"):
        link = sbin / command
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("xtables-nft-multi")
    return paths
