"""What `clusterctl move` needs around two management clusters, and running it.

clusterctl only moves between clusters it recognises as management clusters: both must serve the Cluster
API contract it was built for (the storage version of clusters.cluster.x-k8s.io) and carry its provider
inventory, the CRD `providers.clusterctl.cluster.x-k8s.io` (cmd/clusterctl/config/manifest/clusterctl-api.yaml
in the CAPI module) with one Provider object per installed provider. `clusterctl init` writes those and
labels every component `clusterctl.cluster.x-k8s.io`; move discovers only the kinds whose CRD has that
label. The harness installs providers without clusterctl, so `install_inventory` does what `clusterctl
init` would for CAPI core, kubeadm bootstrap, kubeadm control plane and capfleet. Move refuses to start
unless every provider of the source is in the target at the same or a newer version.

Move also refuses while a Machine has no `status.nodeRef`. The test machines run no kubelet, so
`register_nodes` plays the kubelet's one part CAPI looks at: a Node in the workload cluster whose
`spec.providerID` is the Machine's; CAPI's machine controller then sets the nodeRef itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from capfleet.runtime import VERSION as CAPFLEET_VERSION
from capfleet_e2e.capibin import CAPI_VERSION, run_clusterctl
from capfleet_e2e.crds import apply_crds, capi_module_dir
from capfleet_e2e.kubebin import Kubectl

__all__ = [
    "CAPI_PROVIDERS",
    "MOVE_LABEL",
    "PROVIDERS",
    "install_inventory",
    "inventory",
    "move",
    "register_nodes",
    "remove_inventory",
]

INVENTORY_CRD = Path("cmd") / "clusterctl" / "config" / "manifest" / "clusterctl-api.yaml"
INVENTORY_API = "clusterctl.cluster.x-k8s.io/v1alpha3"
MOVE_LABEL = "clusterctl.cluster.x-k8s.io/move"
CLUSTERCTL_LABEL = "clusterctl.cluster.x-k8s.io"
CAPI_CRDS = "cluster.x-k8s.io/provider in (cluster-api,bootstrap-kubeadm,control-plane-kubeadm)"
MOVE_TIMEOUT = 600.0

# (object name, providerName, type, namespace, version) as `clusterctl init` records them.
InventoryEntry = tuple[str, str, str, str, str]
PROVIDERS: tuple[InventoryEntry, ...] = (
    ("cluster-api", "cluster-api", "CoreProvider", "capi-system", CAPI_VERSION),
    ("bootstrap-kubeadm", "kubeadm", "BootstrapProvider", "capi-kubeadm-bootstrap-system", CAPI_VERSION),
    (
        "control-plane-kubeadm",
        "kubeadm",
        "ControlPlaneProvider",
        "capi-kubeadm-control-plane-system",
        CAPI_VERSION,
    ),
    (
        "infrastructure-capfleet",
        "capfleet",
        "InfrastructureProvider",
        "capfleet-system",
        f"v{CAPFLEET_VERSION}",
    ),
)


CAPI_PROVIDERS = PROVIDERS[:3]
"""Cluster API's own three, which the harness runs as processes (capfleet_e2e.capi)."""


def inventory(providers: tuple[InventoryEntry, ...] = PROVIDERS) -> list[dict[str, Any]]:
    """The provider namespaces and Provider objects `clusterctl init` would leave behind."""
    objects: list[dict[str, Any]] = []
    for name, provider_name, kind, namespace, version in providers:
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        objects.append(
            {
                "apiVersion": INVENTORY_API,
                "kind": "Provider",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {CLUSTERCTL_LABEL: "", "cluster.x-k8s.io/provider": name},
                },
                "providerName": provider_name,
                "type": kind,
                "version": version,
            }
        )
    return objects


def install_inventory(kubectl: Kubectl, providers: tuple[InventoryEntry, ...] = PROVIDERS) -> None:
    """clusterctl's inventory CRD (from the CAPI module), the providers' Provider objects, and the
    label `clusterctl init` puts on every component: move discovers only the kinds whose CRD carries
    it, and the harness installs CAPI's CRDs without it (capfleet's own CRDs ship with it)."""
    crd = yaml.safe_load((capi_module_dir(CAPI_VERSION) / INVENTORY_CRD).read_text())
    apply_crds(kubectl, [crd])
    kubectl("label", "crd", "--overwrite", f"--selector={CAPI_CRDS}", f"{CLUSTERCTL_LABEL}=")
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=clusterctl",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": inventory(providers)}),
    )


def remove_inventory(kubectl: Kubectl) -> None:
    """Delete the Provider objects again (the CRD and the namespaces stay, as `clusterctl delete` leaves
    namespaces it did not create)."""
    for name, _, _, namespace, _ in PROVIDERS:
        kubectl(
            "delete", "providers.clusterctl.cluster.x-k8s.io", name, "-n", namespace, "--ignore-not-found"
        )


def move(source: Path, target: Path, namespace: str, *, timeout: float = MOVE_TIMEOUT) -> str:
    """Run the real `clusterctl move` of `namespace` from `source` to `target` (kubeconfig paths); return
    its output, or raise with it on failure."""
    return run_clusterctl(
        "move",
        "--kubeconfig",
        str(source),
        "--to-kubeconfig",
        str(target),
        "--namespace",
        namespace,
        "-v",
        "3",
        timeout=timeout,
    )


def register_nodes(workload: Kubectl, machines: Iterable[Mapping[str, Any]]) -> list[str]:
    """A Node per Machine in the workload cluster, named after the Machine and carrying its providerID,
    as a kubelet would register it; returns the Node names."""
    nodes: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": m["metadata"]["name"]},
            "spec": {"providerID": m["spec"]["providerID"]},
        }
        for m in machines
    ]
    workload(
        "apply",
        "--server-side",
        "--field-manager=kubelet",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
    )
    return [n["metadata"]["name"] for n in nodes]
