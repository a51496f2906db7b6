"""Where the harness finds the real Cluster API binaries: the three managers and clusterctl.

hack/build-capi.sh builds them from the Go module sigs.k8s.io/cluster-api (the version whose CRDs
capfleet_e2e.crds installs) into $CAPFLEET_CACHE/capi/<version>/bin, once per machine. Tests that run
CAPI's controllers (capfleet_e2e.capi) or render templates with clusterctl call `ensure_capi_binaries`,
which builds them on first use, as `ensure_kube_binaries` does for Kubernetes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from capfleet_e2e.crds import CAPI_VERSION
from capfleet_e2e.kubebin import cache_root, ensure_built, repo_root

__all__ = [
    "CAPI_BINARIES",
    "CAPI_VERSION",
    "capd_config_dir",
    "capi_bin_dir",
    "clusterctl_binary",
    "ensure_capd",
    "ensure_capi_binaries",
]

CAPI_BINARIES = ("capi-manager", "kubeadm-bootstrap-manager", "kubeadm-control-plane-manager", "clusterctl")
_BUILD_SCRIPT = Path("hack") / "build-capi.sh"
CAPD_BINARY = "capd-manager"
_CAPD_BUILD_SCRIPT = Path("hack") / "build-capd.sh"


def capi_bin_dir(version: str = CAPI_VERSION) -> Path:
    return cache_root() / "capi" / version / "bin"


def ensure_capi_binaries(version: str = CAPI_VERSION) -> Path:
    """The directory holding the CAPI managers and clusterctl, building them first if any is missing."""
    return ensure_built(
        f"Cluster API {version}",
        capi_bin_dir(version),
        CAPI_BINARIES,
        repo_root() / _BUILD_SCRIPT,
        {"CAPI_VERSION": version},
    )


def clusterctl_binary(version: str = CAPI_VERSION) -> Path:
    """clusterctl of that version (built if missing).

    Run it with CLUSTERCTL_DISABLE_VERSIONCHECK=true (otherwise it looks up newer releases online and
    records them in $XDG_CONFIG_HOME/cluster-api/version.yaml) and, to keep ~/.config untouched, with
    XDG_CONFIG_HOME pointing to a temporary directory.
    """
    return ensure_capi_binaries(version) / "clusterctl"


def run_clusterctl(*args: str, timeout: float, version: str = CAPI_VERSION) -> str:
    """Run clusterctl as `clusterctl_binary` says to (no version check, a throw-away config home, which
    is also its working directory); return its output, or raise AssertionError with it on failure."""
    with tempfile.TemporaryDirectory(prefix="capfleet-clusterctl-") as home:
        env = {**os.environ, "CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "XDG_CONFIG_HOME": home, "HOME": home}
        result = subprocess.run(
            [str(clusterctl_binary(version)), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=home,
            check=False,
        )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"clusterctl {args[0]} failed (exit {result.returncode}):\n{output}")
    return output


def capd_config_dir(version: str = CAPI_VERSION) -> Path:
    """CAPD's `config/` (its CRD kustomize folder), kept beside the binaries by hack/build-capd.sh."""
    return capi_bin_dir(version).parent / "capd" / "config"


def ensure_capd(version: str = CAPI_VERSION) -> Path:
    """The directory holding capd-manager (CAPI's test infrastructure provider, for its in-memory backend),
    building it first if missing; the script keeps its CRDs beside it (`capd_config_dir`) before building."""
    return ensure_built(
        f"CAPD {version}",
        capi_bin_dir(version),
        (CAPD_BINARY,),
        repo_root() / _CAPD_BUILD_SCRIPT,
        {"CAPI_VERSION": version},
    )
