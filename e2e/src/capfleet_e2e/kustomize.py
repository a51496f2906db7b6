"""kustomize for the deploy tests: the real binary, built from Go modules, and a copy of the deploy tree.

hack/build-kustomize.sh builds `sigs.k8s.io/kustomize/kustomize/v5` into $CAPFLEET_CACHE (default
~/.cache/capfleet)/kustomize/<version>/bin; `make setup` runs it, and `ensure_kustomize` runs it on first
use otherwise. `copy_deploy_tree` copies what the overlays reference (deploy/, crds/, every operator's
config/) so a test can `kustomize edit` an overlay without touching the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.kubebin import HarnessError, artifacts_dir, cache_root, find_go, repo_root

KUSTOMIZE_VERSION = "v5.7.1"
_BUILD_SCRIPT = Path("hack") / "build-kustomize.sh"


def kustomize_path(version: str = KUSTOMIZE_VERSION) -> Path:
    return cache_root() / "kustomize" / version / "bin" / "kustomize"


def ensure_kustomize(version: str = KUSTOMIZE_VERSION) -> Path:
    """The cached kustomize binary, building it first if it is missing."""
    binary = kustomize_path(version)
    if os.access(binary, os.X_OK):
        return binary
    log = artifacts_dir() / "build-kustomize.log"
    path = f"{Path(find_go()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    with log.open("wb") as out:
        result = subprocess.run(
            ["bash", str(repo_root() / _BUILD_SCRIPT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUSTOMIZE_VERSION": version, "PATH": path},
            check=False,
        )
    if result.returncode != 0 or not os.access(binary, os.X_OK):
        raise HarnessError(f"building kustomize {version} failed (exit {result.returncode}); see {log}")
    return binary


def kustomize(*args: str, cwd: Path | None = None) -> str:
    """Run kustomize; return stdout, raise `HarnessError` with stderr on failure."""
    result = subprocess.run(
        [str(ensure_kustomize()), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise HarnessError(
            f"kustomize {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result.stdout


def build(directory: Path) -> str:
    """`kustomize build <directory>`: the rendered YAML stream."""
    return kustomize("build", str(directory))


def documents(rendered: str) -> list[dict[str, Any]]:
    """The objects of a rendered YAML stream."""
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def set_image(overlay: Path, image: str) -> None:
    """`kustomize edit set image <image>` in `overlay`, as a user upgrading one operator does."""
    kustomize("edit", "set", "image", image, cwd=overlay)


def copy_deploy_tree(destination: Path, root: Path | None = None) -> Path:
    """Copy deploy/, crds/ and operators/*/config/ under `destination`, keeping the layout; return it."""
    root = root or repo_root()
    for relative in (Path("deploy"), Path("crds")):
        shutil.copytree(root / relative, destination / relative)
    for config in sorted((root / "operators").glob("*/config")):
        shutil.copytree(config, destination / config.relative_to(root))
    return destination
