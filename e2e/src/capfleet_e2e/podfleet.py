"""The fleet as pods of a management cluster, for `site.open_site`: settings, the lab's addresses, boot.

The operators are the Deployments `clusterctl init` installed (mgmtcluster.py). What the host-process
suites pass as environment goes, as a user's settings go, into each operator's optional ConfigMap
`capfleet-<operator>-settings` (read by `envFrom`), followed by `kubectl rollout restart`: the settings
outlive `clusterctl upgrade` and `kubectl apply -k`, which replace the Deployments.

The lab's services listen on the host's loopback; pods reach each at the same port on the node's pod
gateway through relays (`ManagementNode.reach_host`), so the site registers them under that address (the
hypervisor's known_hosts entry, NetBox's URL, the BMC addresses in NetBox; the lab's certificates name
it). The lab's servers reach the boot server as users are told to expose it: baremetal-provision's `boot`
Service patched as deploy/components/boot-exposed patches it (LoadBalancer, externalTrafficPolicy Local),
the node plugged into the lab's bridge with the load balancer's address, as MetalLB's L2 mode answers for
one from a node, and that address in the Service's status, as a load-balancer controller writes it.
kube-proxy then carries each server's requests to the leader's pod with the server's own source address,
which the boot server binds each attempt to. Only the first, static `boot.ipxe` that dnsmasq names comes
through a relay from the lab's HTTP address to the cluster IP (it binds nothing); it chains to the load
balancer's address. The installer's kernel and initrd come from a plain file server on the lab network,
as a site's image server would serve them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.kubebin import Kubectl, repo_root
from capfleet_e2e.mgmtcluster import ManagementCluster
from capfleet_e2e.processes import Component, free_port, wait_for
from capfleet_e2e.site import OPERATOR_ENV

NAMESPACE = "capfleet-system"
BOOT_SERVICE = "capfleet-baremetal-provision-boot"
FILES_PORT = 8090
"""The file server's port on the lab's address."""
ROLLOUT_TIMEOUT = "180s"
LOAD_BALANCER_HOST = 2
"""The load balancer's host number on the lab network (the bridge is .1, DHCP .100 to .200)."""
BOOT_EXPOSED = Path("deploy") / "components" / "boot-exposed" / "kustomization.yaml"


def boot_exposed() -> dict[str, Any]:
    """deploy/components/boot-exposed, whose patch the site applies to the installed Service."""
    found: dict[str, Any] = yaml.safe_load((repo_root() / BOOT_EXPOSED).read_text())
    return found


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
        self._links: list[str] = []

    def reach(self, port: int) -> str:
        return self.node.reach_host(port)

    def boot(self, pxe_lab: PxeLab, files: Path) -> tuple[dict[str, str], str, str]:
        service = json.loads(self.kubectl("get", "service", BOOT_SERVICE, "-n", NAMESPACE, "-o", "json"))
        cluster_ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
        pxe_lab.network.forward_http_to(port, host=cluster_ip, via=self.node.in_netns([]))
        boot_url = self.expose_boot(pxe_lab, port)
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
        return {**OPERATOR_ENV["baremetal_provision"], "CAPFLEET_BOOT_URL": boot_url}, boot_url, files_url

    def expose_boot(self, pxe_lab: PxeLab, port: int) -> str:
        """The `boot` Service as a load balancer on the lab network (see the module's docstring); returns
        the URL servers reach it at, once it answers there."""
        network = pxe_lab.network
        address = str(network.network.network_address + LOAD_BALANCER_HOST)
        ops = yaml.safe_load(boot_exposed()["patches"][0]["patch"])
        self.kubectl("patch", "service", BOOT_SERVICE, "-n", NAMESPACE, "--type=json", "-p", json.dumps(ops))
        self._links.append(
            self.node.join_network(network.name, network.bridge, f"{address}/{network.network.prefixlen}")
        )
        ingress = {"status": {"loadBalancer": {"ingress": [{"ip": address}]}}}
        self.kubectl(
            "patch", "service", BOOT_SERVICE, "-n", NAMESPACE, "--subresource=status", "--type=merge",
            "-p", json.dumps(ingress),
        )  # fmt: skip
        url = f"http://{address}:{port}"
        probe = network.exec_argv(["curl", "-fsS", "-o", "/dev/null", "--max-time", "5", f"{url}/boot.ipxe"])

        def answers() -> bool | None:
            return True if subprocess.run(probe, capture_output=True, check=False).returncode == 0 else None

        wait_for(f"the boot Service at {url} from the lab network", answers, 60, [])
        return url

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
        while self._links:
            self.node.leave_network(self._links.pop())
