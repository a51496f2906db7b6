"""`capfleet-images`: build capfleet's node image and deploy ramdisk for production, and publish them.

The command an operator runs (and `make node-image` / `make deploy-ramdisk`), separate from the test
harness: `node` and `ramdisk` build the artefact, or reuse it from the cache ($CAPFLEET_CACHE, default
~/.cache/capfleet), and print where it is; with `--output DIR` they copy it into DIR next to a SHA256SUMS
file, ready to upload (disk.qcow2 into each hypervisor's storage pool) or serve (disk.raw and its
checksum to bare-metal servers; vmlinuz and initrd.img to baremetal-provision). `versions` says what goes
into the node image. Builds run the checkout's hack/*.sh (Go), so the command runs from a checkout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from capfleet_images.cache import BuildError, cache_root
from capfleet_images.deployramdisk.build import DeployRamdisk, RamdiskError, ensure_deploy_ramdisk
from capfleet_images.hostkernel import KernelError
from capfleet_images.nodeimage import rootfs, versions
from capfleet_images.nodeimage.build import QCOW2, RAW, NodeImage, ensure_node_image
from capfleet_images.nodeimage.rootfs import RootfsError
from capfleet_images.publish import SUMS, publish

PROG = "capfleet-images"
# What stops a build with a message worth showing as it is (a missing package, no root, no Go, ...).
BUILD_ERRORS = (BuildError, RamdiskError, RootfsError, KernelError)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Build capfleet's node image and deploy ramdisk (or reuse them from the cache) and "
        "publish them with their checksums.",
        epilog=f"The cache is $CAPFLEET_CACHE (now {cache_root()}); build logs go to $CAPFLEET_ARTIFACTS "
        "(default: _artifacts/ in the checkout).",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    node = commands.add_parser(
        "node",
        help="the node image: disk.qcow2 (VM base volume) and disk.raw (bare-metal disks)",
        description="Build the node image if it is not cached (as root, about 10 minutes the first time), "
        "and print where it is.",
    )
    ramdisk = commands.add_parser(
        "ramdisk",
        help="the deploy ramdisk: vmlinuz and initrd.img, network-booted by bare-metal servers",
        description="Build the deploy ramdisk from this machine's Debian packages if it is not cached, "
        "and print where it is.",
    )
    for command in (node, ramdisk):
        command.add_argument(
            "--output",
            "-o",
            type=Path,
            metavar="DIR",
            help=f"copy the artefacts into DIR (made if missing) and write {SUMS} there",
        )
    commands.add_parser(
        "versions",
        help="what goes into the node image: Kubernetes, etcd, CoreDNS, kube-vip, pause, Debian, registry",
        description="Print the versions the node image is built with (capfleet_images.nodeimage.versions).",
    )
    return top


def version_rows(chosen: versions.NodeImageVersions | None = None) -> list[tuple[str, str]]:
    """(what, version) for everything `versions` prints, in order."""
    chosen = chosen or versions.NodeImageVersions()
    return [
        ("Kubernetes", chosen.kubernetes),
        ("etcd", f"{versions.ETCD_VERSION} (image tag {versions.ETCD_IMAGE_TAG})"),
        ("CoreDNS", versions.COREDNS_VERSION),
        ("kube-vip", versions.KUBE_VIP_VERSION),
        ("pause", versions.PAUSE_TAG),
        ("Debian suite", rootfs.SUITE),
        ("image repository", chosen.image_repository),
    ]


def versions_text(chosen: versions.NodeImageVersions | None = None) -> str:
    """The `versions` output: one aligned `what  version` line each, then the image references kubeadm
    finds preloaded."""
    chosen = chosen or versions.NodeImageVersions()
    rows = version_rows(chosen)
    width = max(len(what) for what, _ in rows)
    lines = [f"{what:<{width}}  {version}" for what, version in rows]
    lines += ["", "preloaded images:", *(f"  {ref}" for ref in chosen.images().values())]
    return "\n".join(lines) + "\n"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def node_command(output: Path | None) -> None:
    image: NodeImage = ensure_node_image(progress=_progress)
    if output is None:
        print(f"qcow2 (VM base volume): {image.qcow2}")
        print(f"raw (bare-metal disks): {image.raw}")
        print(f"build record: {image.record}")
        return
    _progress(f"Copying the node image into {output} ...")
    digests = publish({QCOW2: image.qcow2, RAW: image.raw}, output, own=(RAW,))
    print(f"qcow2 (VM base volume): {output / QCOW2}")
    print(f"raw (bare-metal disks): {output / RAW} (sha256 {digests[RAW]}, also in {output / RAW}.sha256)")
    print(f"checksums: {output / SUMS}")


def ramdisk_command(output: Path | None) -> None:
    started = time.monotonic()
    ramdisk: DeployRamdisk = ensure_deploy_ramdisk(progress=_progress)
    record = ramdisk.record
    kernel, initrd = ramdisk.kernel, ramdisk.initrd
    if output is not None:
        _progress(f"Copying the deploy ramdisk into {output} ...")
        publish({kernel.name: kernel, initrd.name: initrd}, output)
        kernel, initrd = output / kernel.name, output / initrd.name
    print(f"kernel: {kernel} ({record['kernel_version']}, {kernel.stat().st_size / 1e6:.1f} MB)")
    print(f"initrd: {initrd} ({initrd.stat().st_size / 1e6:.1f} MB)")
    if output is not None:
        print(f"checksums: {output / SUMS}")
    print(f"build: {record['seconds']} s when built; {time.monotonic() - started:.1f} s now")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "node":
            node_command(args.output)
        elif args.command == "ramdisk":
            ramdisk_command(args.output)
        else:
            sys.stdout.write(versions_text())
    except BUILD_ERRORS as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
