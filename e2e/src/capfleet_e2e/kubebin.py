"""How the harness finds its Kubernetes binaries and talks to a cluster; the cache and the builds are
capfleet_images.cache's, re-exported here for the harness's many importers.

kube-apiserver, kube-controller-manager and kubectl are built from Go modules by hack/build-kube.sh and
cached per version under $CAPFLEET_CACHE (default ~/.cache/capfleet), so only the first run on a machine
pays for the build. `Kubectl` is the one way the harness talks to a cluster from Python: it works the
same against the local control plane and against any cluster a user's kubeconfig describes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from capfleet_images.cache import (
    KUBE_BINARIES,
    KUBE_VERSION,
    NODE_KUBE_BINARIES,
    BuildError,
    artifacts_dir,
    cache_lock,
    cache_root,
    ensure_built,
    ensure_kube_binaries,
    find_go,
    kube_bin_dir,
    repo_root,
)

__all__ = [
    "KUBE_BINARIES",
    "KUBE_VERSION",
    "NODE_KUBE_BINARIES",
    "BuildError",
    "HarnessError",
    "Kubectl",
    "artifacts_dir",
    "cache_lock",
    "cache_root",
    "ensure_built",
    "ensure_kube_binaries",
    "find_go",
    "find_kubectl",
    "kube_bin_dir",
    "repo_root",
]


class HarnessError(RuntimeError):
    """The harness cannot set itself up (missing tools, a kubectl call that failed, ...); a failed build
    raises capfleet_images.cache.BuildError."""


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
