"""Where the harness finds the real Cluster API binaries: the three managers and clusterctl.

hack/build-capi.sh builds them from the Go module sigs.k8s.io/cluster-api (the version whose CRDs
capfleet_e2e.crds installs) into $CAPFLEET_CACHE/capi/<version>/bin, once per machine. Tests that run
CAPI's controllers (capfleet_e2e.capi) or render templates with clusterctl call `ensure_capi_binaries`,
which builds them on first use, as `ensure_kube_binaries` does for Kubernetes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from capfleet_e2e.crds import CAPI_VERSION
from capfleet_e2e.kubebin import HarnessError, artifacts_dir, cache_root, find_go, repo_root

__all__ = [
    "CAPI_BINARIES",
    "CAPI_VERSION",
    "capi_bin_dir",
    "clusterctl_binary",
    "ensure_capi_binaries",
]

CAPI_BINARIES = ("capi-manager", "kubeadm-bootstrap-manager", "kubeadm-control-plane-manager", "clusterctl")
_BUILD_SCRIPT = Path("hack") / "build-capi.sh"


def capi_bin_dir(version: str = CAPI_VERSION) -> Path:
    return cache_root() / "capi" / version / "bin"


def ensure_capi_binaries(version: str = CAPI_VERSION) -> Path:
    """The directory holding the CAPI managers and clusterctl, building them first if any is missing."""
    bin_dir = capi_bin_dir(version)
    if all(os.access(bin_dir / b, os.X_OK) for b in CAPI_BINARIES):
        return bin_dir
    script = repo_root() / _BUILD_SCRIPT
    log = artifacts_dir() / "build-capi.log"
    path = f"{Path(find_go()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    with log.open("wb") as out:
        result = subprocess.run(
            ["bash", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CAPI_VERSION": version, "PATH": path},
            check=False,
        )
    missing = [b for b in CAPI_BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if result.returncode != 0 or missing:
        raise HarnessError(
            f"building Cluster API {version} with {script} failed (exit {result.returncode}, missing "
            f"{missing}); see {log}. It needs Go >= 1.24 on PATH and access to the Go module proxy."
        )
    return bin_dir


def clusterctl_binary(version: str = CAPI_VERSION) -> Path:
    """clusterctl of that version (built if missing).

    Run it with CLUSTERCTL_DISABLE_VERSIONCHECK=true (otherwise it looks up newer releases online and
    records them in $XDG_CONFIG_HOME/cluster-api/version.yaml) and, to keep ~/.config untouched, with
    XDG_CONFIG_HOME pointing to a temporary directory.
    """
    return ensure_capi_binaries(version) / "clusterctl"
