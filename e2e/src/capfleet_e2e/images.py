"""capfleet's images as the suites use them: built by `make images` (hack/images.sh), read as archives.

`ensure_images` builds the five operator images and the console's from operators/Dockerfile (on this
machine from a base made of Debian's packages, with buildah or podman) and returns the OCI archives the
build wrote: what a release ships, what the management node (mgmtnode.py) loads into containerd. A warm
build reuses every cached layer and only writes the archives again.

`OciArchive` reads one archive without any container engine: its image config (user, entry point, labels)
and the files each layer holds, so tests check what really is in an image.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from capfleet_e2e.kubebin import artifacts_dir, cache_root, repo_root

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
IMAGES = (*OPERATORS, "console")
REGISTRY = "capfleet"
BUILD_TIMEOUT = 1800.0


def version() -> str:
    """capfleet's version, as the images are tagged by default (v<version>)."""
    for line in (repo_root() / "shared" / "src" / "capfleet" / "runtime.py").read_text().splitlines():
        if line.startswith("VERSION = "):
            return line.split('"')[1]
    raise RuntimeError("no VERSION in capfleet.runtime")


def reference(image: str, tag: str) -> str:
    """The full reference an archive names its image by (and the kubelet asks containerd for)."""
    return f"docker.io/{REGISTRY}/{image}:{tag}"


def ensure_images(
    tag: str | None = None, images: Sequence[str] = IMAGES, env: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """Build `images` tagged `tag` (default v<version>) into $CAPFLEET_CACHE/images/<tag>; image → archive."""
    tag = tag or f"v{version()}"
    out = cache_root() / "images" / tag
    log = artifacts_dir() / f"images-{tag}.log"
    settings = {"IMAGE_TAG": tag, "IMAGES_DIR": str(out), "OPERATORS": " ".join(images), **(env or {})}
    with log.open("wb") as sink:
        done = subprocess.run(
            ["bash", str(repo_root() / "hack" / "images.sh")],
            cwd=repo_root(),
            env={**os.environ, **settings},
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"make images failed ({done.returncode}); see {log}")
    return {image: out / f"{image}.tar" for image in images}


@dataclass
class OciArchive:
    """One image in an OCI archive (an OCI image layout as a tar file) with a single manifest."""

    path: Path

    def _blob(self, digest: str) -> bytes:
        with tarfile.open(self.path) as tar:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

    @cached_property
    def index(self) -> dict[str, Any]:
        with tarfile.open(self.path) as tar:
            member = tar.extractfile("index.json")
            assert member is not None
            return dict(json.load(member))

    @property
    def name(self) -> str:
        return str(self.index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])

    @property
    def digest(self) -> str:
        """The manifest's digest (sha256:...): what a registry serves the image by, and a release pins."""
        return str(self.index["manifests"][0]["digest"])

    @cached_property
    def manifest(self) -> dict[str, Any]:
        return dict(json.loads(self._blob(self.digest)))

    @property
    def layers(self) -> list[str]:
        return [layer["digest"] for layer in self.manifest["layers"]]

    @cached_property
    def config(self) -> dict[str, Any]:
        return dict(json.loads(self._blob(self.manifest["config"]["digest"]))["config"])

    def files(self, layer: str) -> set[str]:
        """The paths one layer adds or changes (without a leading "./" or "/")."""
        data = self._blob(layer)
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            return {name.removeprefix("./").lstrip("/") for name in tar.getnames()}

    def all_files(self) -> set[str]:
        found: set[str] = set()
        for layer in self.layers:
            found |= self.files(layer)
        return found
