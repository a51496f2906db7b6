"""The images as `make images` builds them: one Dockerfile for all, only the operator's own package,
non-root, labelled, one shared base layer.

The build runs for real (hack/images.sh: buildah or podman, a base made from Debian's packages), and the
tests read what it wrote, the OCI archives a release ships and the management node loads. That the images
also start, pass their probes and reach the API server as pods is test_mgmt_node.py's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from capfleet_e2e.images import IMAGES, OPERATORS, OciArchive, reference
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.release import TEST_VERSION, Release

LIBVIRT = "libvirt-vm"
OCI = "org.opencontainers.image."
TAG = f"v{TEST_VERSION}"
SITE_PACKAGES = "app/.venv/lib/python3.11/site-packages/"
PACKAGES = {op: op.replace("-", "_") for op in OPERATORS} | {"console": "capfleet_console"}


@pytest.fixture(scope="module")
def archives(capfleet_release: Release) -> dict[str, OciArchive]:
    return {image: OciArchive(path) for image, path in capfleet_release.archives().items()}


integration = pytest.mark.integration


@integration
def test_every_image_is_named_and_shares_one_base_layer(archives: dict[str, OciArchive]) -> None:
    assert set(archives) == set(IMAGES)
    for image, archive in archives.items():
        assert archive.name == reference(image, TAG)
    assert len({archive.layers[0] for archive in archives.values()}) == 1, "one base layer for all six"
    base = next(iter(archives.values())).files(next(iter(archives.values())).layers[0])
    assert "usr/bin/python3.11" in base
    assert "usr/share/doc/python3.11/copyright" in base, "the licences stay in the base"
    assert not any(name.startswith("usr/share/man/") and "." in name for name in base)


@integration
@pytest.mark.parametrize("image", IMAGES)
def test_the_image_holds_only_its_own_package_and_runs_it_as_non_root(
    archives: dict[str, OciArchive], image: str
) -> None:
    archive = archives[image]
    files = archive.all_files()
    installed = {name[len(SITE_PACKAGES) :].split("/")[0] for name in files if name.startswith(SITE_PACKAGES)}
    assert PACKAGES[image] in installed
    assert "capfleet" in installed, "the shared package"
    assert not (set(PACKAGES.values()) - {PACKAGES[image]}) & installed, "no other operator's package"
    assert ("libvirt" in " ".join(installed)) == (image == LIBVIRT)
    assert any(name.startswith(f"{SITE_PACKAGES}{PACKAGES[image]}/__pycache__/") for name in files), (
        "compiled bytecode in the image"
    )
    config = archive.config
    assert config["User"] == "65532:65532", "numeric, so the kubelet can check runAsNonRoot"
    assert config["Entrypoint"] == ["capfleet-operator"]
    assert "PYTHONUNBUFFERED=1" in config["Env"]
    labels = config["Labels"]
    assert labels[f"{OCI}title"] == f"capfleet-{image}"
    assert labels[f"{OCI}version"] == TEST_VERSION
    assert f"CAPFLEET_VERSION={TEST_VERSION}" in config["Env"], "what the operator reports as its version"
    assert labels[f"{OCI}revision"]
    assert labels[f"{OCI}source"]


@integration
def test_only_libvirt_vm_carries_the_libvirt_client_library(archives: dict[str, OciArchive]) -> None:
    for image, archive in archives.items():
        files = archive.all_files()
        has_library = any(name.startswith("usr/lib/x86_64-linux-gnu/libvirt.so.0") for name in files)
        assert has_library == (image == LIBVIRT), image
        assert not any(name.endswith(("/libvirtd", "/virsh")) for name in files)
        assert not any(name.endswith(("bin/gcc", "bin/uv", "bin/cc")) for name in files), "no build tools"


def test_the_dockerfile_bases_are_pinned_by_digest() -> None:
    text = (repo_root() / "operators" / "Dockerfile").read_text()
    for arg in ("PYTHON_IMAGE", "UV_IMAGE"):
        (line,) = [line for line in text.splitlines() if line.startswith(f"ARG {arg}=")]
        assert re.fullmatch(r"ARG \w+=\S+:\S+@sha256:[0-9a-f]{64}", line), line


@integration
def test_an_unknown_operator_stops_the_build(archives: dict[str, OciArchive], tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", "hack/images.sh"],
        cwd=repo_root(),
        env={**os.environ, "OPERATORS": "nginx", "IMAGES_DIR": str(tmp_path), "IMAGE_TAG": TAG},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode != 0
    assert "OPERATOR must name one of the five operators or console, not 'nginx'" in result.stderr
    assert not (tmp_path / "nginx.tar").exists()


def test_compose_builds_every_operator_from_the_one_dockerfile() -> None:
    compose = yaml.safe_load((repo_root() / "docker-compose.yaml").read_text())
    for operator in OPERATORS:
        build = compose["services"][operator]["build"]
        assert build["dockerfile"] == "operators/Dockerfile"
        assert build["args"] == {"OPERATOR": operator}
    assert not list((repo_root() / "operators").glob("*/Dockerfile")), "no per-operator copies"


def test_make_images_without_a_container_engine_fails_plainly() -> None:
    result = subprocess.run(
        ["make", "--no-print-directory", "images", "CONTAINER_ENGINE="],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "no container engine found" in result.stderr
