"""A stand-in for a workload cluster's API server, so Cluster API can get past "control plane initialized".

The test machines have no kubelet, so no kubeadm control plane ever comes up on them. But CAPI's
KubeadmControlPlane only needs one thing to mark a control plane initialized: reading the ConfigMap
kube-system/kubeadm-config through the `<cluster>-kubeconfig` Secret it generates from the cluster CA
(controlplane/kubeadm/internal: `setControlPlaneInitialized`, `Workload.ClusterStatus`). So
`WorkloadAPIServer` is a real kube-apiserver on 127.0.0.1 that plays the workload cluster:

- it keeps its data in the management control plane's etcd under its own `--etcd-prefix` (no second etcd);
- its serving certificate and its client CA are the *cluster CA*, whose key CAPI receives in the
  `<cluster>-ca` Secret (`ca_secret`), so the client certificates CAPI mints for the kubeconfig are trusted;
- `upload_kubeadm_config` does what `kubeadm init` does at the end, and that is the moment a test decides
  the control plane came up.

The harness itself talks to it with a bearer token (`kubectl`, `kubeconfig`).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from capfleet_e2e.controlplane import START_TIMEOUT, ControlPlane, apiserver_argv, https_ok, new_log_dir
from capfleet_e2e.kubebin import KUBE_VERSION, Kubectl, ensure_kube_binaries, kube_bin_dir
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.pki import CertificateAuthority, service_account_key_pair, write_private
from capfleet_e2e.processes import Component, free_port, wait_for
from capfleet_e2e.workload_access import CLUSTER_NAME_LABEL, cluster_secret

__all__ = ["CLUSTER_NAME_LABEL", "WorkloadAPIServer"]

ADMIN_USER = "workload-admin"
KUBEADM_CONFIG = "kubeadm-config"


class WorkloadAPIServer:
    """A kube-apiserver standing in for workload cluster `cluster_name`; use as a context manager."""

    host = "127.0.0.1"

    def __init__(
        self,
        control_plane: ControlPlane,
        cluster_name: str,
        *,
        ca: CertificateAuthority | None = None,
        version: str = KUBE_VERSION,
        start_timeout: float = START_TIMEOUT,
    ):
        self.control_plane = control_plane
        self.cluster_name = cluster_name
        self.ca = ca or CertificateAuthority.generate("kubernetes")  # kubeadm's name for the cluster CA
        self.version = version
        self.start_timeout = start_timeout
        self.port = free_port()
        self.server = f"https://{self.host}:{self.port}"
        self.etcd_prefix = f"/capfleet-workload/{cluster_name}-{secrets.token_hex(4)}"
        self.component: Component | None = None
        self._token = secrets.token_urlsafe(32)
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-workload-"))
        self.kubeconfig = self._tmp / "admin.kubeconfig"
        self.ca_path = self._tmp / "ca.crt"
        self.kubectl = Kubectl(kube_bin_dir(version) / "kubectl", self.kubeconfig)
        self.log_dir: Path | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the apiserver and wait until it is ready; on failure stop it and re-raise."""
        if self.control_plane.etcd_url is None:
            raise RuntimeError("the control plane is not started (it has no etcd yet)")
        try:
            bin_dir = ensure_kube_binaries(self.version)
            write_private(self.ca_path, self.ca.cert_pem)
            cert, key = self.ca.issue_serving("kube-apiserver", ("localhost", "kubernetes"), (self.host,))
            sa_key, sa_pub = service_account_key_pair()
            tokens = f'{self._token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            argv = apiserver_argv(
                bin_dir / "kube-apiserver",
                port=self.port,
                etcd_url=self.control_plane.etcd_url,
                cert_dir=self._tmp / "apiserver",
                cert=write_private(self._tmp / "apiserver.crt", cert),
                key=write_private(self._tmp / "apiserver.key", key),
                client_ca=self.ca_path,
                sa_pub=write_private(self._tmp / "sa.pub", sa_pub),
                sa_key=write_private(self._tmp / "sa.key", sa_key),
                tokens=write_private(self._tmp / "tokens.csv", tokens.encode()),
                etcd_prefix=self.etcd_prefix,
            )
            self.log_dir = new_log_dir(f"workload-{self.cluster_name}")
            self.component = Component("kube-apiserver", argv, self.log_dir)
            write_kubeconfig(self.kubeconfig, self.server, self.ca_path, ADMIN_USER, self._token)
            ready = partial(https_ok, f"{self.server}/readyz", self.ca_path, self._token)
            wait_for(
                f"workload {self.cluster_name} kube-apiserver /readyz",
                ready,
                self.start_timeout,
                [self.component],
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the apiserver and remove its files (its keys in etcd go with the control plane's etcd)."""
        if self.component is not None:
            self.component.stop()
            self.component = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def ca_secret(self, namespace: str) -> dict[str, Any]:
        """The `<cluster>-ca` Secret CAPI reads the cluster CA from (instead of generating one)."""
        data = {"tls.crt": self.ca.cert_pem, "tls.key": self.ca.key_pem}
        return cluster_secret(self.cluster_name, namespace, "ca", data)

    def cluster_configuration(self, kubernetes_version: str) -> dict[str, Any]:
        """The ClusterConfiguration `kubeadm init` (v1.31+, config API v1beta4) records for this cluster."""
        return {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "ClusterConfiguration",
            "apiServer": {},
            "caCertificateValidityPeriod": "87600h0m0s",
            "certificateValidityPeriod": "8760h0m0s",
            "certificatesDir": "/etc/kubernetes/pki",
            "clusterName": self.cluster_name,
            "controlPlaneEndpoint": f"{self.host}:{self.port}",
            "controllerManager": {},
            "dns": {},
            "encryptionAlgorithm": "RSA-2048",
            "etcd": {"local": {"dataDir": "/var/lib/etcd"}},
            "imageRepository": "registry.k8s.io",
            "kubernetesVersion": kubernetes_version,
            "networking": {"dnsDomain": "cluster.local", "serviceSubnet": "10.96.0.0/12"},
            "proxy": {},
            "scheduler": {},
        }

    def upload_kubeadm_config(self, kubernetes_version: str = "v1.33.0") -> None:
        """Create kube-system/kubeadm-config as `kubeadm init` does (phase upload-config/kubeadm).

        This is the signal KubeadmControlPlane takes for "the first control-plane node is up".
        """
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": KUBEADM_CONFIG, "namespace": "kube-system"},
            "data": {
                "ClusterConfiguration": yaml.safe_dump(
                    self.cluster_configuration(kubernetes_version), sort_keys=True
                )
            },
        }
        self.kubectl(
            "apply", "--server-side", "--field-manager=kubeadm", "-f", "-", stdin=yaml.safe_dump(config_map)
        )
