"""Where capfleet's artefacts are built and cached, and how a build from Go modules is run once per machine.

This lives here, not in the test harness, because the node image and the deploy ramdisk are production
artefacts built by the same code the tests use: `capfleet-images` and the harness (capfleet_e2e.kubebin
imports everything below from here) share one cache under $CAPFLEET_CACHE (default ~/.cache/capfleet),
one lock per artefact, and one way of running the checkout's hack/*.sh Go builds. The Kubernetes binaries
are built from the `k8s.io/kubernetes` module by hack/build-kube.sh into <cache>/kube/<version>/bin, so only
the first build on a machine pays for them.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path

KUBE_VERSION = "v1.33.13"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kubectl")
# What a kubeadm node needs besides: the node image's binaries and its control-plane container images.
NODE_KUBE_BINARIES = (*KUBE_BINARIES, "kube-scheduler", "kube-proxy", "kubelet", "kubeadm")
BUILD_SCRIPT = Path("hack") / "build-kube.sh"
_GO_FALLBACK = "/usr/local/go/bin"


class BuildError(RuntimeError):
    """An artefact cannot be built (no checkout, missing tools, a failed build, ...)."""


@cache
def repo_root() -> Path:
    """The capfleet checkout: the first parent of this file that holds hack/build-kube.sh. The Go builds
    run the checkout's hack/*.sh, so capfleet-images runs from a checkout (`uv run` in the workspace)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / BUILD_SCRIPT).is_file():
            return parent
    raise BuildError(
        f"cannot find the capfleet repository (a parent of {__file__} with {BUILD_SCRIPT}): "
        "run capfleet-images from a checkout of the repository"
    )


def cache_root() -> Path:
    return Path(os.environ.get("CAPFLEET_CACHE") or Path.home() / ".cache" / "capfleet")


@contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing): two builds of one cached artefact, in two
    test sessions or a test and `make`, wait for each other instead of writing the same files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def kube_bin_dir(version: str = KUBE_VERSION) -> Path:
    return cache_root() / "kube" / version / "bin"


@cache
def artifacts_dir() -> Path:
    """$CAPFLEET_ARTIFACTS, or <repo>/_artifacts/<timestamp>/ (one per process, e.g. per test session):
    where the build logs go (and the test harness's artifacts)."""
    configured = os.environ.get("CAPFLEET_ARTIFACTS")
    if configured:
        path = Path(configured)
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = repo_root() / "_artifacts" / f"{stamp}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_go() -> str:
    """The Go toolchain: `go` on PATH, else the official tarball's /usr/local/go/bin/go."""
    found = shutil.which("go") or shutil.which("go", path=_GO_FALLBACK)
    if not found:
        raise BuildError(f"Go >= 1.24 is needed (on PATH or in {_GO_FALLBACK}) but was not found")
    return found


def ensure_built(
    what: str, bin_dir: Path, binaries: Sequence[str], script: Path, env: Mapping[str, str]
) -> Path:
    """`bin_dir`, after running build `script` (with `env` added) if any of `binaries` is missing there."""
    if all(os.access(bin_dir / b, os.X_OK) for b in binaries):
        return bin_dir
    log = artifacts_dir() / f"{script.stem}.log"
    path = f"{Path(find_go()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    with log.open("wb") as out:
        result = subprocess.run(
            ["bash", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, "PATH": path},
            check=False,
        )
    missing = [b for b in binaries if not os.access(bin_dir / b, os.X_OK)]
    if result.returncode != 0 or missing:
        raise BuildError(
            f"building {what} with {script} failed (exit {result.returncode}, missing "
            f"{missing}); see {log}. It needs Go >= 1.24 on PATH and access to the Go module proxy."
        )
    return bin_dir


def ensure_kube_binaries(version: str = KUBE_VERSION, binaries: Sequence[str] = KUBE_BINARIES) -> Path:
    """The directory holding the Kubernetes `binaries`, building them first if any is missing."""
    return ensure_built(
        f"Kubernetes {version}",
        kube_bin_dir(version),
        binaries,
        repo_root() / BUILD_SCRIPT,
        {"KUBE_VERSION": version, "KUBE_BINARIES": " ".join(binaries)},
    )
