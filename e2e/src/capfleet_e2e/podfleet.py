"""The fleet as pods of a management cluster, for `site.open_site`: settings, the lab's addresses, boot.

The operators are the Deployments `clusterctl init` installed (mgmtcluster.py). What the host-process
suites pass as environment goes, as a user's settings go, into each operator's optional ConfigMap
`capfleet-<operator>-settings` (read by `envFrom`), followed by `kubectl rollout restart`: the settings
outlive `clusterctl upgrade` and `kubectl apply -k`, which replace the Deployments.

The lab's services listen on the host's loopback; pods reach each at the same port on the node's pod
gateway through relays (`ManagementNode.reach_host`), so the site registers them under that address (the
hypervisor's known_hosts entry, NetBox's URL, the BMC addresses in NetBox; the lab's certificates name
it). The lab's servers reach the boot server as users are told to expose it: the provisioning network
carries them to baremetal-provision's `boot` Service, here a relay from the lab's HTTP address into the
node, to the Service's cluster IP, where kube-proxy picks the leader's pod. The installer's kernel and
initrd come from a plain file server on the lab network, as a site's image server would serve them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.mgmtcluster import ManagementCluster
from capfleet_e2e.processes import Component, free_port, wait_for
from capfleet_e2e.site import OPERATOR_ENV

NAMESPACE = "capfleet-system"
BOOT_SERVICE = "capfleet-baremetal-provision-boot"
FILES_PORT = 8090
"""The file server's port on the lab's address."""
ROLLOUT_TIMEOUT = "180s"


def operator_name(module: str) -> str:
    return module.replace("_", "-")


def deployment(operator: str) -> str:
    return f"capfleet-{operator}-manager"


@dataclass
class PodOperator:
    """One operator's Deployment, as the site's handle for it."""

    kubectl: Kubectl
    operator: str

    def running(self) -> bool:
        found = json.loads(
            self.kubectl("get", "deployment", deployment(self.operator), "-n", NAMESPACE, "-o", "json")
        )
        status = found.get("status") or {}
        return bool(status.get("availableReplicas") == found["spec"]["replicas"])


class PodFleet:
    """`reach`, `boot` and `start_operator` for open_site, on `mgmt` (initialized)."""

    def __init__(self, mgmt: ManagementCluster) -> None:
        assert mgmt.node is not None
        assert mgmt.initialized, "clusterctl init first"
        self.mgmt = mgmt
        self.node = mgmt.node
        self.kubectl = mgmt.kubectl
        self._files: Component | None = None
        self._restarted: list[str] = []

    def reach(self, port: int) -> str:
        return self.node.reach_host(port)

    def boot(self, pxe_lab: PxeLab, files: Path) -> tuple[dict[str, str], str, str]:
        service = json.loads(self.kubectl("get", "service", BOOT_SERVICE, "-n", NAMESPACE, "-o", "json"))
        cluster_ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
        pxe_lab.network.forward_http_to(port, host=cluster_ip, via=self.node.in_netns([]))
        serving = free_port()
        argv = [
            sys.executable,
            "-u",
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(files),
            str(serving),
        ]
        self._files = Component("lab-files", argv, self.node.log_dir)
        server = self._files
        wait_for(
            "the lab's file server",
            lambda: True if "Serving HTTP" in server.log_path.read_text() else None,
            20,
            [server],
        )
        files_url = pxe_lab.network.publish(FILES_PORT, serving)
        url = pxe_lab.network.http_url().rstrip("/")
        return {**OPERATOR_ENV["baremetal_provision"], "CAPFLEET_BOOT_URL": url}, url, files_url

    def start_operator(self, module: str, env: dict[str, str]) -> PodOperator:
        """The operator's settings ConfigMap, then a restart of its Deployment to read it (`settle` waits
        for every restart)."""
        operator = operator_name(module)
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"capfleet-{operator}-settings", "namespace": NAMESPACE},
            "data": env,
        }
        self.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(config_map))
        self.kubectl("rollout", "restart", f"deployment/{deployment(operator)}", "-n", NAMESPACE)
        self._restarted.append(operator)
        return PodOperator(self.kubectl, operator)

    def settle(self) -> None:
        """Wait until every restarted Deployment has rolled out."""
        for operator in self._restarted:
            self.kubectl(
                "rollout",
                "status",
                f"deployment/{deployment(operator)}",
                "-n",
                NAMESPACE,
                f"--timeout={ROLLOUT_TIMEOUT}",
                timeout=240,
            )
        self._restarted.clear()

    def stop(self) -> None:
        if self._files is not None:
            self._files.stop()
            self._files = None
