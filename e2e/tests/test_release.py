"""`make release`: dist/ as clusterctl reads it, every image pinned by digest, SBOMs that match the images.

The release is made for real once per run (the `capfleet_release` fixture: hack/images.sh, then
capfleet_e2e.release); test_mgmt_node.py installs that same release with `clusterctl init`.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from capfleet_e2e.capibin import run_clusterctl
from capfleet_e2e.clusterctl_components import INFRASTRUCTURE, IPAM, PROVIDERS, Provider
from capfleet_e2e.images import IMAGES, OciArchive, reference
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.kustomize import documents
from capfleet_e2e.release import SUMS, TEMPLATES, TENANT_RBAC, Release, ReleaseError, metadata, sha256

SITE_PACKAGES = re.compile(r"^app/\.venv/lib/python3\.11/site-packages/([^/]+)-([^-/]+)\.dist-info/METADATA$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def images_of(components: str) -> set[str]:
    return {
        container["image"]
        for obj in documents(components)
        if obj["kind"] == "Deployment"
        for container in obj["spec"]["template"]["spec"]["containers"]
    }


# --- without a build ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.1.0", "0.1.7", "0.1.0-rc.1"])
def test_a_release_of_a_listed_series_is_accepted(version: str) -> None:
    assert "releaseSeries" in metadata(version, repo_root())


@pytest.mark.parametrize("version", ["0.2.0", "1.1.0", "v0.1.0", "latest"])
def test_a_release_of_an_unlisted_series_or_a_bad_version_is_refused(version: str) -> None:
    with pytest.raises(ReleaseError):
        metadata(version, repo_root())


# --- the release made in this run ---------------------------------------------------------------------

integration = pytest.mark.integration


@integration
def test_dist_is_a_clusterctl_repository_with_every_file_summed(capfleet_release: Release) -> None:
    dist, tag = capfleet_release.dist, capfleet_release.tag
    files = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    expected = {
        SUMS,
        "clusterctl.yaml",
        *(
            f"infrastructure-capfleet/{tag}/{name}"
            for name in (INFRASTRUCTURE.file, "metadata.yaml", *TEMPLATES, TENANT_RBAC)
        ),
        *(f"ipam-capfleet/{tag}/{name}" for name in (IPAM.file, "metadata.yaml")),
        *(f"images/{image}.tar" for image in IMAGES),
        *(f"images/{image}.cdx.json" for image in IMAGES),
    }
    assert files == expected
    summed = {}
    for line in (dist / SUMS).read_text().splitlines():
        digest, name = line.split("  ", 1)
        summed[name] = digest
    assert set(summed) == files - {SUMS}
    assert {name: sha256(dist / name) for name in summed} == summed
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", SUMS], cwd=dist, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


@integration
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_every_image_is_pinned_to_the_digest_of_the_archive_beside_it(
    capfleet_release: Release, provider: Provider
) -> None:
    text = capfleet_release.components(provider).read_text()
    expected = set()
    for operator in provider.images:
        archive = OciArchive(capfleet_release.archive(operator))
        assert archive.name == reference(operator, capfleet_release.tag)
        expected.add(
            f"${{CAPFLEET_IMAGE_REGISTRY:=docker.io/capfleet}}/{operator}:{capfleet_release.tag}@{archive.digest}"
        )
    assert images_of(text) == expected
    assert "_IMAGE_TAG" not in text, "a pinned release has no tag variables"


@integration
@pytest.mark.timeout(1800)  # the first use builds clusterctl
def test_clusterctl_renders_both_providers_from_dist_with_no_variable_left(capfleet_release: Release) -> None:
    config = str(capfleet_release.clusterctl_config)
    for flag, provider in (("--infrastructure", INFRASTRUCTURE), ("--ipam", IPAM)):
        rendered = run_clusterctl(
            "generate", "provider", flag, f"capfleet:{capfleet_release.tag}", "--config", config, timeout=120
        )
        assert "${" not in rendered
        pinned = images_of(rendered)
        assert len(pinned) == len(provider.images)
        assert all(
            re.fullmatch(r"docker\.io/capfleet/[a-z-]+:v[\w.-]+@sha256:[0-9a-f]{64}", i) for i in pinned
        )


@integration
@pytest.mark.parametrize("image", IMAGES)
def test_each_sbom_lists_exactly_the_python_packages_in_its_image(
    capfleet_release: Release, image: str
) -> None:
    archive = OciArchive(capfleet_release.archive(image))
    bom = json.loads((capfleet_release.dist / "images" / f"{image}.cdx.json").read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.5")
    described = bom["metadata"]["component"]
    assert described["type"] == "container"
    assert described["hashes"] == [{"alg": "SHA-256", "content": archive.digest.removeprefix("sha256:")}]
    assert described["version"] == capfleet_release.tag
    listed = {(normalized(c["name"]), c["version"]) for c in bom["components"]}
    installed = set()
    for name in archive.all_files():
        match = SITE_PACKAGES.match(name)
        if match:
            installed.add((normalized(match.group(1)), match.group(2)))
    assert installed, "the image has packages"
    assert listed == installed
    refs = {c["bom-ref"] for c in bom["components"]} | {described["bom-ref"]}
    assert all(d["ref"] in refs and set(d.get("dependsOn", [])) <= refs for d in bom["dependencies"])
