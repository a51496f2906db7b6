"""Where the harness finds its Kubernetes binaries, the repository, and where it writes artifacts.

kube-apiserver, kube-controller-manager and kubectl are built from Go modules by hack/build-kube.sh and
cached per version under $CAPFLEET_CACHE (default ~/.cache/capfleet), so only the first run on a machine
pays for the build. `Kubectl` is the one way the harness talks to a cluster from Python: it works the
same against the local control plane and against any cluster a user's kubeconfig describes.
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
_BUILD_SCRIPT = Path("hack") / "build-kube.sh"
_GO_FALLBACK = "/usr/local/go/bin"


class HarnessError(RuntimeError):
    """The harness cannot set itself up (missing tools, failed build, ...)."""


@cache
def repo_root() -> Path:
    """The capfleet checkout: the first parent of this file that holds hack/build-kube.sh."""
    for parent in Path(__file__).resolve().parents:
        if (parent / _BUILD_SCRIPT).is_file():
            return parent
    raise HarnessError(f"cannot find the capfleet repository (a parent of {__file__} with {_BUILD_SCRIPT})")


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
    """$CAPFLEET_ARTIFACTS, or <repo>/_artifacts/<timestamp>/ (one per test session)."""
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
        raise HarnessError(f"Go >= 1.24 is needed (on PATH or in {_GO_FALLBACK}) but was not found")
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
        raise HarnessError(
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
        repo_root() / _BUILD_SCRIPT,
        {"KUBE_VERSION": version, "KUBE_BINARIES": " ".join(binaries)},
    )


def find_kubectl() -> Path:
    """The cached kubectl if present, else one on PATH, else build the cached one."""
    cached = kube_bin_dir() / "kubectl"
    if os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which("kubectl")
    if on_path:
        return Path(on_path)
    return ensure_kube_binaries() / "kubectl"


class Kubectl:
    """kubectl bound to one kubeconfig."""

    def __init__(self, binary: Path, kubeconfig: Path):
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        """Run kubectl; return stdout, raise `HarnessError` with stderr on failure."""
        argv: Sequence[str] = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise HarnessError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result.stdout
