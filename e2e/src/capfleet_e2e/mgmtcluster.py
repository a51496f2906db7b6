"""A management cluster that gets capfleet as users install it: `clusterctl init` from a release.

`ManagementCluster` is a control plane of its own (controlplane.py, without capfleet's CRDs: they come
from the release) with a node that runs pods (mgmtnode.py) and has every image of the release loaded.
`init()` runs the real clusterctl:

    clusterctl init --infrastructure capfleet --ipam capfleet --config <dist>/clusterctl.yaml --wait-providers

What clusterctl would also install on an empty cluster is already there, as the harness runs it:

- Cluster API's core, kubeadm bootstrap and kubeadm control-plane providers run as host processes
  (capi.py, started with `start_capi()`); their Provider objects are in clusterctl's inventory, so
  clusterctl installs only capfleet's two. It still reads the core provider's metadata.yaml to check
  contracts: the configuration names a local repository holding the CAPI module's own metadata.yaml.
- cert-manager: clusterctl checks for it by creating an Issuer and a Certificate, and installs it when
  that fails. capfleet's components use no cert-manager and no registry here serves its images, so the
  cluster carries cert-manager's two CRDs (`CERT_MANAGER_CRDS`), which is all the check creates; without
  clusterctl's labels, clusterctl counts it as externally managed and never upgrades it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import yaml

from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.capibin import CAPI_VERSION, run_clusterctl
from capfleet_e2e.clusterctl_move import CAPI_PROVIDERS, install_inventory
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.crds import apply_crds, capi_module_dir
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.mgmtnode import ManagementNode
from capfleet_e2e.release import Release

INIT_TIMEOUT = 600.0


def _stand_in_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


CERT_MANAGER_CRDS = (_stand_in_crd("Issuer", "issuers"), _stand_in_crd("Certificate", "certificates"))


def clusterctl_config(release: Release, repository: Path) -> dict[str, Any]:
    """The release's `providers:` and the core provider's local repository (its metadata.yaml only)."""
    core = repository / "cluster-api" / CAPI_VERSION
    core.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(capi_module_dir(CAPI_VERSION) / "metadata.yaml", core / "metadata.yaml")
    providers = yaml.safe_load(release.clusterctl_config.read_text())["providers"]
    entry = {"name": "cluster-api", "type": "CoreProvider", "url": f"file://{core / 'core-components.yaml'}"}
    return {"providers": [entry, *providers]}


class ManagementCluster:
    """A control plane, a node and clusterctl's view of both; use as a context manager."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.cp = ControlPlane(capfleet_crds=False)
        self.node: ManagementNode | None = None
        self.capi: CapiManagers | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-mgmt-"))
        self.config = self._tmp / "clusterctl.yaml"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def kubectl(self) -> Kubectl:
        return self.cp.kubectl

    def start(self) -> Self:
        try:
            self.cp.start()
            self.node = ManagementNode(self.cp, self.release.archives().values()).start()
            apply_crds(self.cp.kubectl, list(CERT_MANAGER_CRDS))
            install_inventory(self.cp.kubectl, CAPI_PROVIDERS)
            config = clusterctl_config(self.release, self._tmp / "repository")
            self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        except BaseException:
            self.stop()
            raise
        return self

    def start_capi(self) -> CapiManagers:
        """Cluster API's three managers on this cluster (for provisioning; `init` needs only their
        inventory)."""
        if self.capi is None:
            self.capi = CapiManagers(self.cp).start()
        return self.capi

    def clusterctl(self, *args: str, timeout: float = INIT_TIMEOUT) -> str:
        """Run the real clusterctl against this cluster with its configuration; return its output."""
        kubeconfig, config = str(self.cp.kubeconfig), str(self.config)
        return run_clusterctl(
            *args, "--kubeconfig", kubeconfig, "--config", config, "-v", "2", timeout=timeout
        )

    def init(self) -> float:
        """`clusterctl init` of capfleet's two providers, waiting until every Deployment is Available;
        returns the seconds it took."""
        began = time.monotonic()
        self.clusterctl("init", "--infrastructure", "capfleet", "--ipam", "capfleet", "--wait-providers")
        return time.monotonic() - began

    def providers(self) -> dict[str, str]:
        """clusterctl's inventory: provider object name → version."""
        found = json.loads(
            self.cp.kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
        )
        return {p["metadata"]["name"]: p["version"] for p in found["items"]}

    def stop(self) -> None:
        try:
            if self.capi is not None:
                self.capi.stop()
                self.capi = None
        finally:
            try:
                if self.node is not None:
                    self.node.stop()
                    self.node = None
            finally:
                self.cp.stop()
                shutil.rmtree(self._tmp, ignore_errors=True)
