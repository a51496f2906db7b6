"""`make release VERSION=x.y.z`: a capfleet release in dist/, laid out as clusterctl reads a repository.

    dist/
      infrastructure-capfleet/v<x.y.z>/  infrastructure-components.yaml, metadata.yaml,
                                         cluster-template*.yaml, tenant-rbac.yaml (deploy/tenant)
      ipam-capfleet/v<x.y.z>/            ipam-components.yaml, metadata.yaml
      images/<image>.tar                 the six images as OCI archives (docker.io/capfleet/<image>:v<x.y.z>)
      images/<image>.cdx.json            an SBOM per image (CycloneDX 1.5)
      clusterctl.yaml                    the `providers:` entries pointing clusterctl at this directory
      SHA256SUMS

The components name every image by tag *and* manifest digest (`<registry>/<op>:v<x.y.z>@sha256:...`), so
what runs is what was built here, whatever the tag later points at. The registry stays a clusterctl
variable (CAPFLEET_IMAGE_REGISTRY): copying an archive into a mirror with `skopeo copy --preserve-digests
oci-archive:<image>.tar docker://<mirror>/<image>:v<x.y.z>` keeps the digest. The release series must
already be in deploy/clusterctl/metadata.yaml: which contract a series implements is a maintainer's call.

Each SBOM is uv's CycloneDX export of the image's workspace member from uv.lock (exactly the packages
`uv sync --frozen --package` installs in the image), with the image itself as the described component
(its digest as a hash, an OCI purl). The Debian base's packages are not listed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.clusterctl_components import INFRASTRUCTURE, OUTPUT_DIR, PROVIDERS, Pin, Provider, render
from capfleet_e2e.images import IMAGES, OciArchive, ensure_images
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.kustomize import build as kustomize_build

TEMPLATES = ("cluster-template.yaml", "cluster-template-vm.yaml", "cluster-template-baremetal.yaml")
TENANT_RBAC = "tenant-rbac.yaml"
"""deploy/tenant rendered: what opts a namespace in to the operators reading its Secrets."""
SUMS = "SHA256SUMS"
TEST_VERSION = "0.1.0-test"
"""The version the suites release and install (its series, 0.1, is in metadata.yaml)."""
SBOM_SUFFIX = ".cdx.json"
# The SBOM's serial number is derived from the image digest, so one image always has one SBOM identity.
SBOM_NAMESPACE = uuid.UUID("6f6c1e52-4a8e-4b8e-9d57-3c0a3b1f2a10")


@dataclass(frozen=True)
class Release:
    """A release written to `dist`."""

    version: str
    dist: Path

    @property
    def tag(self) -> str:
        return tag_of(self.version)

    @property
    def clusterctl_config(self) -> Path:
        return self.dist / "clusterctl.yaml"

    def archive(self, image: str) -> Path:
        return self.dist / "images" / f"{image}.tar"

    def archives(self) -> dict[str, Path]:
        return {image: self.archive(image) for image in IMAGES if self.archive(image).exists()}

    def components(self, provider: Provider) -> Path:
        return provider_dir(self.dist, provider, self.version) / provider.file

    @property
    def tenant_rbac(self) -> Path:
        return provider_dir(self.dist, INFRASTRUCTURE, self.version) / TENANT_RBAC


class ReleaseError(Exception):
    """The release cannot be made as asked (an unknown release series, a bad version)."""


def tag_of(version: str) -> str:
    return f"v{version}"


def metadata(version: str, root: Path) -> str:
    """deploy/clusterctl/metadata.yaml, after checking that it lists the version's release series."""
    text = (root / OUTPUT_DIR / "metadata.yaml").read_text()
    try:
        major, minor = (int(part) for part in version.split("-")[0].split(".")[:2])
    except ValueError as exc:
        raise ReleaseError(f"VERSION must be x.y.z (semantic versioning), not {version!r}") from exc
    series = yaml.safe_load(text).get("releaseSeries") or []
    if not any(s.get("major") == major and s.get("minor") == minor for s in series):
        raise ReleaseError(
            f"release series {major}.{minor} is not in deploy/clusterctl/metadata.yaml: add it with the "
            "Cluster API contract it implements"
        )
    return text


def pins(archives: Mapping[str, Path], images: Sequence[str] = IMAGES) -> dict[str, Pin]:
    """Image → its release: the tag its archive names and its manifest's digest."""
    result = {}
    for image in images:
        archive = OciArchive(archives[image])
        result[image] = Pin(archive.name.rsplit(":", 1)[1], archive.digest)
    return result


def sbom(image: str, archive: OciArchive, root: Path, created: str) -> dict[str, Any]:
    """The image's CycloneDX SBOM: uv's export of its workspace member, describing the image itself."""
    exported = subprocess.run(
        [
            "uv",
            "export",
            "--frozen",
            "--quiet",
            "--preview-features",
            "sbom-export",
            "--format",
            "cyclonedx1.5",
            "--no-dev",
            "--package",
            f"capfleet-{image}",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    bom: dict[str, Any] = json.loads(exported.stdout)
    repository, tag = archive.name.rsplit(":", 1)
    digest = archive.digest
    project = bom["metadata"]["component"]
    bom["serialNumber"] = f"urn:uuid:{uuid.uuid5(SBOM_NAMESPACE, digest)}"
    bom["metadata"]["timestamp"] = created
    bom["metadata"]["component"] = {
        "type": "container",
        "bom-ref": f"{repository}@{digest}",
        "name": repository,
        "version": tag,
        "hashes": [{"alg": "SHA-256", "content": digest.removeprefix("sha256:")}],
        "purl": f"pkg:oci/{repository.rsplit('/', 1)[1]}@{digest.replace(':', '%3A')}"
        f"?repository_url={repository.rsplit('/', 1)[0]}&tag={tag}",
    }
    bom["components"] = [project, *bom.get("components", [])]
    dependencies = bom.setdefault("dependencies", [])
    if not any(d.get("ref") == project["bom-ref"] for d in dependencies):
        dependencies.append({"ref": project["bom-ref"], "dependsOn": []})
    dependencies.append({"ref": f"{repository}@{digest}", "dependsOn": [project["bom-ref"]]})
    return bom


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sums(dist: Path) -> str:
    """SHA256SUMS of every file under `dist` but itself, as `sha256sum -c` reads them."""
    lines = [
        f"{sha256(path)}  {path.relative_to(dist).as_posix()}"
        for path in sorted(dist.rglob("*"))
        if path.is_file() and path.name != SUMS
    ]
    return "\n".join(lines) + "\n"


def provider_dir(dist: Path, provider: Provider, version: str) -> Path:
    return dist / provider.name / tag_of(version)


def clusterctl_config(dist: Path, version: str, providers: Sequence[Provider] = PROVIDERS) -> dict[str, Any]:
    """clusterctl.yaml's `providers:` for the release in `dist` (an absolute path)."""
    return {
        "providers": [
            {
                "name": "capfleet",
                "type": provider.type,
                "url": f"file://{provider_dir(dist.resolve(), provider, version) / provider.file}",
            }
            for provider in providers
        ]
    }


def released_images(providers: Sequence[Provider]) -> tuple[str, ...]:
    """The images a release of `providers` ships, in IMAGES' order."""
    shipped = {image for provider in providers for image in provider.images}
    return tuple(i for i in IMAGES if i in shipped)


def write(
    version: str,
    dist: Path,
    archives: Mapping[str, Path],
    root: Path | None = None,
    providers: Sequence[Provider] = PROVIDERS,
) -> Path:
    """The release of `version` in `dist` (emptied first) from the built `archives` (image → archive);
    all providers, or (a provider released on its own) only `providers`."""
    root = root or repo_root()
    meta = metadata(version, root)
    if dist.exists():
        shutil.rmtree(dist)
    released = pins(archives, released_images(providers))
    created = release_time(root)
    for provider in providers:
        out = provider_dir(dist, provider, version)
        out.mkdir(parents=True)
        (out / provider.file).write_text(render(provider, root, released, version))
        (out / "metadata.yaml").write_text(meta)
        if provider is INFRASTRUCTURE:
            for template in TEMPLATES:
                shutil.copyfile(root / OUTPUT_DIR / template, out / template)
            (out / TENANT_RBAC).write_text(kustomize_build(root / "deploy" / "tenant"))
    images = dist / "images"
    images.mkdir()
    for image in released_images(providers):
        archive = images / f"{image}.tar"
        try:
            os.link(archives[image], archive)  # the archives are large; a hard link where it can be one
        except OSError:
            shutil.copyfile(archives[image], archive)
        bom = sbom(image, OciArchive(archive), root, created)
        (images / f"{image}{SBOM_SUFFIX}").write_text(json.dumps(bom, indent=2) + "\n")
    config = clusterctl_config(dist, version, providers)
    (dist / "clusterctl.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (dist / SUMS).write_text(sums(dist))
    return dist


def release_time(root: Path) -> str:
    """When the release's source was made: SOURCE_DATE_EPOCH, else the commit's time (so a release made
    twice from one commit says the same), in CycloneDX's timestamp form."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        done = subprocess.run(
            ["git", "log", "-1", "--format=%ct"], cwd=root, capture_output=True, text=True, check=False
        )
        epoch = done.stdout.strip() or "0"
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build(version: str, dist: Path, providers: Sequence[Provider] = PROVIDERS) -> Release:
    """Build the images of `providers` for `version` (hack/images.sh) and write their release."""
    metadata(version, repo_root())  # refuse an unknown series before a build
    images = released_images(providers)
    archives = ensure_images(tag_of(version), images, env={"VERSION": version})
    return Release(version, write(version, dist, archives, providers=providers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capfleet_e2e.release", description=__doc__)
    parser.add_argument("--version", required=True, help="x.y.z; the images are tagged vx.y.z")
    parser.add_argument("--dist", type=Path, default=None, help="default: <repo>/dist")
    args = parser.parse_args(argv)
    try:
        dist = build(args.version, args.dist or repo_root() / "dist").dist
    except ReleaseError as exc:
        print(f"make release: {exc}", file=sys.stderr)
        return 2
    for line in (dist / SUMS).read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        print(f"{name}  {(dist / name).stat().st_size / 1e6:.1f} MB  sha256:{digest[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
