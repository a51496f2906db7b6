"""Building the node image once per machine: the steps in order, the cache, and what each step took.

`ensure_node_image` returns the cached image for these versions and this recipe, or builds it: the
Kubernetes binaries and the other components from Go modules (cached on their own), the Debian tree
(mmdebstrap), the container images kubeadm runs (docker archives, preloaded at first boot), capfleet's
files, then the disk (raw and qcow2). The cache key covers the versions and the recipe's own source, so
changing either builds a new image next to the old one. A lock file keeps two builds from racing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capfleet_images.cache import NODE_KUBE_BINARIES, cache_lock, cache_root, ensure_kube_binaries, repo_root
from capfleet_images.nodeimage import components, containers, disk, iptables, rootfs
from capfleet_images.nodeimage.versions import NodeImageVersions

QCOW2 = "disk.qcow2"
RAW = "disk.raw"
BUILD_RECORD = "build.json"
RECIPE = (
    Path("images/src/capfleet_images/nodeimage"),
    Path("hack/build-kube.sh"),
    Path("hack/build-node-components.sh"),
)


@dataclass(frozen=True)
class NodeImage:
    """A built node image: `qcow2` for VM base volumes, `raw` for writing to bare-metal disks."""

    directory: Path

    @property
    def qcow2(self) -> Path:
        return self.directory / QCOW2

    @property
    def raw(self) -> Path:
        return self.directory / RAW

    @property
    def record(self) -> dict[str, object]:
        """What the build recorded: versions and how long each step took."""
        loaded: dict[str, object] = json.loads((self.directory / BUILD_RECORD).read_text())
        return loaded


def recipe_digest(versions: NodeImageVersions, root: Path | None = None) -> str:
    """A short digest of the versions and of every file of the recipe: equal digests, equal images."""
    root = root or repo_root()
    digest = hashlib.sha256(repr(versions).encode())
    for entry in RECIPE:
        path = root / entry
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for file in files if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_dir(versions: NodeImageVersions) -> Path:
    return cache_root() / "node-image" / f"{versions.kubernetes}-{recipe_digest(versions)}"


def ensure_node_image(
    versions: NodeImageVersions | None = None, progress: Callable[[str], None] = lambda _: None
) -> NodeImage:
    """The node image for `versions` (default: this harness's), built first if it is not cached."""
    versions = versions or NodeImageVersions()
    image = NodeImage(image_dir(versions))
    with cache_lock(image.directory.with_suffix(".lock")):
        if image.qcow2.is_file():
            return image
        progress(f"Building the node image into {image.directory} (about 10 minutes the first time)...")
        work = Path(tempfile.mkdtemp(prefix="build-", dir=image.directory.parent))
        try:
            steps = build(versions, work, progress)
            (work / "out" / BUILD_RECORD).write_text(
                json.dumps({"versions": repr(versions), "seconds": steps})
            )
            work.joinpath("out").rename(image.directory)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return image


def build(versions: NodeImageVersions, work: Path, progress: Callable[[str], None]) -> dict[str, float]:
    """Every step into `work`; the outputs end in work/out. Returns the seconds each step took."""
    seconds: dict[str, float] = {}

    def step(name: str) -> None:
        seconds[name] = round(time.monotonic() - started, 1)
        progress(f"  {name}: {seconds[name]:.0f} s")

    started = time.monotonic()
    kube = ensure_kube_binaries(versions.kubernetes, NODE_KUBE_BINARIES)
    built = components.ensure_components()
    step("binaries")
    started = time.monotonic()
    tree = work / "rootfs"
    rootfs.debootstrap(tree, log=work / "mmdebstrap.log")
    step("debian")
    started = time.monotonic()
    tool_tree = work / "iptables"
    iptables.iptables_tree(tree, tool_tree)
    tars = containers.write_node_images(versions, kube, built, tool_tree, work / "images")
    step("container images")
    started = time.monotonic()
    rootfs.customise(tree, {b: kube / b for b in ("kubelet", "kubeadm", "kubectl")}, tars, versions)
    out = work / "out"
    out.mkdir()
    disk.build_disk(tree, out / RAW, out / QCOW2, work)
    step("disk")
    return seconds
