"""How the management side reaches a workload cluster whose API lives on a private network.

A workload cluster's API server answers at its control-plane endpoint, a VIP inside the lab network (a
namespace the test run made, with no route to or from the host). Cluster API reaches a workload cluster
through the `<cluster>-kubeconfig` Secret, and only through it, so the harness writes that Secret itself
before the Cluster exists: its server is a loopback port relayed into the lab network to the VIP
(`PxeNetwork.expose`), its client certificate is signed by the cluster CA, which the harness also
provides as `<cluster>-ca` (Cluster API uses a CA it finds instead of generating one). KCP keeps a
kubeconfig Secret it finds and only rotates the ones it made, so nothing ever points the management side
at the VIP itself. The API server's certificate carries 127.0.0.1 (the templates add it to certSANs).

In production the endpoint is routable and none of this is needed: Cluster API writes the Secret.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.kubebin import Kubectl, find_kubectl
from capfleet_e2e.pki import CertificateAuthority, write_private

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CLUSTER_SECRET_TYPE = "cluster.x-k8s.io/secret"
ADMIN_USER = "kubernetes-admin"
ADMIN_GROUP = "system:masters"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def admin_kubeconfig(cluster_name: str, server: str, ca: CertificateAuthority) -> str:
    """A kubeconfig for `server` as a cluster admin, with a new client certificate signed by `ca`."""
    cert, key = ca.issue_client(ADMIN_USER, [ADMIN_GROUP])
    context = f"{ADMIN_USER}@{cluster_name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": b64(ca.cert_pem)},
            }
        ],
        "users": [
            {"name": ADMIN_USER, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}
        ],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": ADMIN_USER}}],
        "current-context": context,
    }
    return yaml.safe_dump(config, sort_keys=False)


def cluster_secret(cluster_name: str, namespace: str, purpose: str, data: dict[str, bytes]) -> dict[str, Any]:
    """A Secret named as Cluster API names the cluster's (`<cluster>-<purpose>`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{cluster_name}-{purpose}",
            "namespace": namespace,
            "labels": {CLUSTER_NAME_LABEL: cluster_name},
        },
        "type": CLUSTER_SECRET_TYPE,
        "data": {key: b64(value) for key, value in data.items()},
    }


@dataclass
class WorkloadAccess:
    """The cluster CA and a loopback server URL for workload cluster `cluster_name`."""

    cluster_name: str
    server: str
    ca: CertificateAuthority

    @classmethod
    def through(cls, cluster_name: str, loopback_port: int) -> WorkloadAccess:
        return cls(
            cluster_name, f"https://127.0.0.1:{loopback_port}", CertificateAuthority.generate("kubernetes")
        )

    def secrets(self, namespace: str) -> list[dict[str, Any]]:
        """`<cluster>-ca` and `<cluster>-kubeconfig`, to create before the Cluster."""
        kubeconfig = admin_kubeconfig(self.cluster_name, self.server, self.ca).encode()
        return [
            cluster_secret(
                self.cluster_name, namespace, "ca", {"tls.crt": self.ca.cert_pem, "tls.key": self.ca.key_pem}
            ),
            cluster_secret(self.cluster_name, namespace, "kubeconfig", {"value": kubeconfig}),
        ]

    def kubectl(self, directory: Path) -> Kubectl:
        """kubectl as the workload cluster's admin, through the relay (kubeconfig written to `directory`)."""
        path = write_private(
            directory / f"{self.cluster_name}.kubeconfig",
            admin_kubeconfig(self.cluster_name, self.server, self.ca).encode(),
        )
        return Kubectl(find_kubectl(), path)
