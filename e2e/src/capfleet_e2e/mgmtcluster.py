"""A management cluster that gets capfleet as users install it: `clusterctl init` from a release.

`ManagementCluster` is a control plane of its own (controlplane.py, without capfleet's CRDs: they come
from the release) with a node that runs pods (mgmtnode.py) and has every image of the release loaded.
`init()` runs the real clusterctl:

    clusterctl init --infrastructure capfleet --ipam capfleet --config <dist>/clusterctl.yaml --wait-providers

What clusterctl would also install on an empty cluster is already there, as the harness runs it:

- Cluster API's core, kubeadm bootstrap and kubeadm control-plane providers run as host processes
  (capi.py, started with `start_capi()`); their Provider objects are in clusterctl's inventory, so
  clusterctl installs only capfleet's two. It still reads their metadata.yaml to check contracts: the
  configuration names a local repository for each holding the CAPI module's own metadata.yaml.
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
from capfleet_e2e.clusterctl_components import PROVIDERS
from capfleet_e2e.clusterctl_move import CAPI_PROVIDERS, install_inventory
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.crds import apply_crds, capi_module_dir
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.mgmtnode import ManagementNode
from capfleet_e2e.release import Release
from capfleet_e2e.release import clusterctl_config as release_config

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


def add_to_repository(repository: Path, release: Release) -> None:
    """Copy the providers' version directories of `release` into a clusterctl repository (beside the
    versions already there: what `clusterctl upgrade` chooses from)."""
    for provider in PROVIDERS:
        source = release.components(provider).parent
        if source.is_dir():
            shutil.copytree(source, repository / provider.name / release.tag, dirs_exist_ok=True)


# Cluster API's own providers as clusterctl names them: (repository label, name, type, components file).
CAPI_REPOSITORIES = (
    ("cluster-api", "cluster-api", "CoreProvider", "core-components.yaml"),
    ("bootstrap-kubeadm", "kubeadm", "BootstrapProvider", "bootstrap-components.yaml"),
    ("control-plane-kubeadm", "kubeadm", "ControlPlaneProvider", "control-plane-components.yaml"),
)


def clusterctl_config(release: Release, repository: Path) -> dict[str, Any]:
    """The release's `providers:` in `repository`, and Cluster API's three with only their metadata.yaml
    (the module's): clusterctl reads every installed provider's to check contracts, and would otherwise
    ask GitHub for it."""
    entries = []
    for label, name, kind, components in CAPI_REPOSITORIES:
        directory = repository / label / CAPI_VERSION
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(capi_module_dir(CAPI_VERSION) / "metadata.yaml", directory / "metadata.yaml")
        entries.append({"name": name, "type": kind, "url": f"file://{directory / components}"})
    add_to_repository(repository, release)
    return {"providers": [*entries, *release_config(repository, release.version)["providers"]]}


class ManagementCluster:
    """A control plane, a node and clusterctl's view of both; use as a context manager."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.cp = ControlPlane(capfleet_crds=False)
        self.node: ManagementNode | None = None
        self.capi: CapiManagers | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-mgmt-"))
        self.repository = self._tmp / "repository"
        self.config = self._tmp / "clusterctl.yaml"
        self.initialized = False

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
            config = clusterctl_config(self.release, self.repository)
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
        self.initialized = True
        return time.monotonic() - began

    def add_release(self, release: Release) -> None:
        """Another release in the repository clusterctl upgrades from, its images on the node."""
        assert self.node is not None
        add_to_repository(self.repository, release)
        for archive in release.archives().values():
            self.node.load(archive)

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
