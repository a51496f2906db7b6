"""Cluster API's floor for N Machines: the same CAPI managers and control plane, with infrastructure that
costs nothing.

`make bench-fleet` compares capfleet's time to N provisioned Machines with what Cluster API itself needs
for N Machines on the same API server. CAPI's own answer to "how fast can the core go" is CAPD's in-memory
backend (DevCluster/DevMachine with `backend.inMemory`, the provider of CAPI's scale tests): its "VMs",
Nodes, etcd members and workload API servers live in capd-manager's memory, so what is left is the core,
kubeadm bootstrap and control-plane controllers and the API server. Every simulated startup is set to zero
here, so the floor has no sleep in it.

`Capd` runs capd-manager (hack/build-capd.sh builds it from the `sigs.k8s.io/cluster-api/test` module)
next to `CapiManagers`, with its CRDs installed as its kustomize folder labels them (conversion pinned to
None: only v1beta2 objects are written). Its workload API servers listen on 127.0.0.1 (`POD_IP`).
`floor_cluster` is the objects of one cluster with a one-replica KubeadmControlPlane and a
MachineDeployment of N workers.
"""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from capfleet_e2e import crds
from capfleet_e2e.capi import HOST, http_ok
from capfleet_e2e.capibin import CAPD_BINARY, CAPI_VERSION, capd_config_dir, ensure_capd
from capfleet_e2e.controlplane import START_TIMEOUT, ControlPlane, new_log_dir
from capfleet_e2e.pki import CertificateAuthority, write_private
from capfleet_e2e.processes import Component, free_port, wait_for

INFRASTRUCTURE = "infrastructure.cluster.x-k8s.io"
KUBERNETES_VERSION = "v1.33.0"
# Each simulated piece of an in-memory machine (VM, Node, etcd member, API server) is up at once.
NO_STARTUP = {"provisioning": {"startupDuration": "0s"}}
IN_MEMORY_MACHINE = {"backend": {"inMemory": dict.fromkeys(("vm", "node", "etcd", "apiServer"), NO_STARTUP)}}


class Capd:
    """capd-manager on loopback with its CRDs installed; use as a context manager."""

    def __init__(self, control_plane: ControlPlane, *, version: str = CAPI_VERSION) -> None:
        self.control_plane = control_plane
        self.version = version
        self.component: Component | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-capd-"))

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _start(self) -> None:
        binary = ensure_capd(self.version) / CAPD_BINARY
        config = capd_config_dir(self.version)
        crds.apply_crds(self.control_plane.kubectl, crds.capi_crds(config.parent, folders=("config/crd",)))
        # Its webhook server must start; no webhook configuration points at it (v1beta2 objects only).
        certs = self._tmp / "webhook-certs"
        certs.mkdir(mode=0o700)
        cert, key = CertificateAuthority.generate("capfleet-capd-ca").issue_serving("capd", ips=(HOST,))
        write_private(certs / "tls.crt", cert)
        write_private(certs / "tls.key", key)
        health = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.control_plane.kubeconfig}",
            "--leader-elect=false",
            f"--webhook-port={free_port()}",
            f"--webhook-cert-dir={certs}",
            f"--health-addr={HOST}:{health}",
            f"--diagnostics-address={HOST}:{free_port()}",
            "--insecure-diagnostics",
        ]
        self.component = Component("capd-manager", argv, new_log_dir("capd"), {"POD_IP": HOST})
        ready = partial(http_ok, f"http://{HOST}:{health}/readyz")
        wait_for("capd-manager /readyz", ready, START_TIMEOUT, [self.component])

    def check_alive(self) -> None:
        if self.component is not None:
            self.component.check_alive()

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None
        shutil.rmtree(self._tmp, ignore_errors=True)


def floor_cluster(namespace: str, name: str, workers: int) -> list[dict[str, Any]]:
    """A cluster of in-memory machines: one control-plane Machine (KCP), `workers` in a MachineDeployment."""
    meta = {"namespace": namespace}
    control_plane = f"{name}-control-plane"

    def infra_ref(kind: str, ref_name: str) -> dict[str, str]:
        return {"apiGroup": INFRASTRUCTURE, "kind": kind, "name": ref_name}

    return [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, **meta},
            "spec": {
                "clusterNetwork": {
                    "pods": {"cidrBlocks": ["192.168.0.0/16"]},
                    "services": {"cidrBlocks": ["10.128.0.0/12"]},
                },
                "infrastructureRef": infra_ref("DevCluster", name),
                "controlPlaneRef": {
                    "apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KubeadmControlPlane",
                    "name": control_plane,
                },
            },
        },
        {
            "apiVersion": f"{INFRASTRUCTURE}/v1beta2",
            "kind": "DevCluster",
            "metadata": {"name": name, **meta},
            "spec": {"backend": {"inMemory": {}}},
        },
        {
            "apiVersion": f"{INFRASTRUCTURE}/v1beta2",
            "kind": "DevMachineTemplate",
            "metadata": {"name": control_plane, **meta},
            "spec": {"template": {"spec": IN_MEMORY_MACHINE}},
        },
        {
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane",
            "metadata": {"name": control_plane, **meta},
            "spec": {
                "replicas": 1,
                "version": KUBERNETES_VERSION,
                "machineTemplate": {
                    "spec": {"infrastructureRef": infra_ref("DevMachineTemplate", control_plane)}
                },
                "kubeadmConfigSpec": {"format": "cloud-config"},
            },
        },
        {
            "apiVersion": f"{INFRASTRUCTURE}/v1beta2",
            "kind": "DevMachineTemplate",
            "metadata": {"name": f"{name}-workers", **meta},
            "spec": {"template": {"spec": IN_MEMORY_MACHINE}},
        },
        {
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": f"{name}-workers", **meta},
            "spec": {"template": {"spec": {"format": "cloud-config"}}},
        },
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {"name": f"{name}-workers", **meta},
            "spec": {
                "clusterName": name,
                "replicas": workers,
                "selector": {"matchLabels": {"capfleet.dev/bench": name}},
                "template": {
                    "metadata": {"labels": {"capfleet.dev/bench": name}},
                    "spec": {
                        "clusterName": name,
                        "version": KUBERNETES_VERSION,
                        "bootstrap": {
                            "configRef": {
                                "apiGroup": "bootstrap.cluster.x-k8s.io",
                                "kind": "KubeadmConfigTemplate",
                                "name": f"{name}-workers",
                            }
                        },
                        "infrastructureRef": infra_ref("DevMachineTemplate", f"{name}-workers"),
                    },
                },
            },
        },
    ]
