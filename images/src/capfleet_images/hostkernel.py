"""The build host's Debian kernel and its loadable modules, for initramfs images made from them.

The deploy ramdisk takes this machine's kernel (linux-image-amd64) and the modules a server's disks and NIC
need; the test harness's tiny test image (capfleet_e2e.libvirt.image) does the same for its VMs. Both need
the newest installed kernel that has its modules, and the modules' files in load order (each after what
it depends on, as modules.dep says; built-in ones left out), so that lookup lives here, once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


class KernelError(RuntimeError):
    """No Debian kernel with modules is installed, or it lacks a module that is asked for."""


def find_kernel() -> tuple[Path, str]:
    """The newest /boot/vmlinuz-<version> that has its modules in /lib/modules/<version>."""
    candidates = []
    for vmlinuz in Path("/boot").glob("vmlinuz-*"):
        version = vmlinuz.name.removeprefix("vmlinuz-")
        if (Path("/lib/modules") / version / "modules.dep").is_file():
            candidates.append((tuple(int(n) for n in re.findall(r"\d+", version)), vmlinuz, version))
    if not candidates:
        raise KernelError(
            "no Debian kernel with modules in /boot and /lib/modules (install linux-image-amd64)"
        )
    _, vmlinuz, version = max(candidates)
    return vmlinuz, version


def module_files(version: str, names: Sequence[str]) -> list[Path]:
    """The .ko files for `names` and their dependencies, in load order (built-in modules are left out)."""
    moddir = Path("/lib/modules") / version
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[module_name(path)] = path
    builtin = {module_name(p) for p in (moddir / "modules.builtin").read_text().split()}
    ordered: list[str] = []

    def visit(path: str) -> None:
        if path in ordered:
            return
        for dep in reversed(deps.get(path, [])):
            visit(dep)
        ordered.append(path)

    for name in names:
        if name in by_name:
            visit(by_name[name])
        elif name not in builtin:
            raise KernelError(f"kernel {version} has no module {name}")
    return [moddir / p for p in ordered]


def module_name(path: str) -> str:
    """A module's name as modules.dep spells it: "kernel/…/crc64-rocksoft.ko.xz" → "crc64_rocksoft"."""
    return Path(path).name.split(".ko")[0].replace("-", "_")
