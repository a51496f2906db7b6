"""The reference Go IPAM provider the benchmark measures ipam-address against, built from Go modules.

hack/build-ipam-reference.sh builds `sigs.k8s.io/cluster-api-ipam-provider-in-cluster` (v1.1.x: CAPI 1.11,
IPAM v1beta2) and copies its CRDs out of the module zip into $CAPFLEET_CACHE/ipam-in-cluster/<version>/;
this module runs that script when the cache is empty, installs the CRDs the way capfleet_e2e.crds
installs Cluster API's (no conversion webhook, so every version is served as stored), and spells the
command line that runs the provider out of cluster: no webhooks, no leader election, probes and metrics
on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.crds import apply_crds
from capfleet_e2e.kubebin import HarnessError, Kubectl, artifacts_dir, cache_root, find_go, repo_root

MODULE = "sigs.k8s.io/cluster-api-ipam-provider-in-cluster"
VERSION = os.environ.get("IPAM_REFERENCE_VERSION", "v1.1.0")
BINARY = "cluster-api-ipam-provider-in-cluster"
_SCRIPT = Path("hack") / "build-ipam-reference.sh"
# What config/crd/patches/clusterctl-label_in_*.yaml adds (the kustomize layer the zip ships unapplied).
_CRD_LABELS = {"clusterctl.cluster.x-k8s.io/move-hierarchy": ""}


def reference_dir(version: str = VERSION) -> Path:
    return cache_root() / "ipam-in-cluster" / version


def _crd_files(version: str) -> list[Path]:
    return sorted((reference_dir(version) / "crds").glob("*.yaml"))


def ensure_reference(version: str = VERSION) -> Path:
    """The provider's binary, building it (and extracting its CRDs) first if the cache lacks either."""
    binary = reference_dir(version) / "bin" / BINARY
    if os.access(binary, os.X_OK) and _crd_files(version):
        return binary
    log = artifacts_dir() / "build-ipam-reference.log"
    path = f"{Path(find_go()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    print(f"building {MODULE}@{version} (first run only; log in {log}) ...", flush=True)
    with log.open("wb") as out:
        result = subprocess.run(
            ["bash", str(repo_root() / _SCRIPT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "IPAM_REFERENCE_VERSION": version, "PATH": path},
            check=False,
        )
    if result.returncode != 0 or not os.access(binary, os.X_OK) or not _crd_files(version):
        raise HarnessError(f"building {MODULE}@{version} failed (exit {result.returncode}); see {log}")
    return binary


def reference_crds(version: str = VERSION) -> list[dict[str, Any]]:
    """The provider's CRDs (InClusterIPPool, GlobalInClusterIPPool and the prefix pools), ready to apply."""
    crds: list[dict[str, Any]] = []
    for path in _crd_files(version):
        crd: dict[str, Any] = yaml.safe_load(path.read_text())
        crd["metadata"].setdefault("labels", {}).update(_CRD_LABELS)
        crd["spec"]["conversion"] = {"strategy": "None"}
        crds.append(crd)
    return crds


def install_reference_crds(kubectl: Kubectl, version: str = VERSION) -> list[str]:
    return apply_crds(kubectl, reference_crds(version))


def reference_argv(
    binary: Path, kubeconfig: Path, namespace: str, health_port: int, metrics_port: int
) -> list[str]:
    """Out of cluster, scoped to `namespace`: `--webhook-port=0` skips its webhooks (see its main.go)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={namespace}",
        "--webhook-port=0",
        "--leader-elect=false",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--diagnostics-address=127.0.0.1:{metrics_port}",
        "--insecure-diagnostics",  # plain HTTP metrics: no TokenReviews against the apiserver
    ]
