"""`make demo`: a Kubernetes cluster of real nodes on libvirt VMs, from `kubectl apply` to Nodes Ready.

It starts what a data centre and a management cluster would have, all local and real: a control plane
(etcd, kube-apiserver, kube-controller-manager), Cluster API's managers, two hypervisors (libvirtd
behind sshd) whose VMs share a private lab network, and capfleet's glue, ipam-address and libvirt-vm as
subprocesses. It renders deploy/clusterctl/cluster-template-vm.yaml (one control-plane VM, one worker
VM, node addresses and the API's VIP from in-cluster IPPools) and applies it. The VMs boot capfleet's
node image (built on first use: `make node-image`); real cloud-init runs Cluster API's `kubeadm init` and
`kubeadm join`. The demo waits until both Nodes are Ready and both Machines Running, prints the workload
cluster's Nodes, the Machines and the cluster tree, and says how to reach the workload cluster.
Interactive runs stay up until Enter; then it deletes the cluster and checks that libvirt holds no
domain or volume of it and that every address went back to its pool, and fails naming what was left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.netns import PxeNetwork
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.nodeimage.build import ensure_node_image
from capfleet_e2e.nodesite import VM_TEMPLATE, NodeLab, NodeSite, open_node_site
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.tree import cluster_tree
from capfleet_e2e.waiting import eventually

NAMESPACE = "capfleet-demo"
CLUSTER = "demo"


def say(text: str = "") -> None:
    print(text, flush=True)


class LeftBehind(RuntimeError):
    """The cluster's deletion left something behind."""


async def leftovers(site: NodeSite) -> list[str]:
    """What the deleted cluster left: libvirt domains and volumes, addresses, claims."""
    found = site.leftovers()
    for resource in (resources.IP_ADDRESSES, resources.IP_ADDRESS_CLAIMS):
        found += [f"{o['kind']} {o['metadata']['name']}" for o in await site.kube.list(resource, NAMESPACE)]
    return found


async def show(site: NodeSite, started: float) -> None:
    say("Waiting for the control-plane Node, then the worker (minutes: the VMs run without KVM)...")
    await eventually("the first Node to be Ready", lambda: site.ready_nodes(1), 1800, 10)
    say(f"  first Node Ready {time.monotonic() - started:.0f} s after kubectl apply")
    await eventually("both Nodes to be Ready", lambda: site.ready_nodes(2), 1200, 10)
    await eventually("both Machines to be Running", lambda: site.running(2), 600, 3)
    took = time.monotonic() - started
    say(f"  both Nodes Ready and both Machines Running {took:.0f} s after kubectl apply\n")
    say("$ kubectl get nodes -o wide      # the workload cluster")
    say(site.workload("get", "nodes", "-o", "wide"))
    say(f"$ kubectl get machines -n {NAMESPACE}      # the management cluster")
    say(site.cp.kubectl("get", "machines", "-n", NAMESPACE))
    say(await cluster_tree(site.kube, NAMESPACE, CLUSTER))
    say("\nLook around while this runs:")
    say(f"  workload cluster:   export KUBECONFIG={site.workload.kubeconfig}; kubectl get pods -A")
    say(f"                      (its API at {site.access.server} is relayed to the VIP")
    say(f"                      {site.variables['CONTROL_PLANE_ENDPOINT_HOST']}:6443 inside the lab network)")
    say(f"  management cluster: export KUBECONFIG={site.cp.kubeconfig}; kubectl get cluster-api,capfleet -A")
    say(f"  console logs of the VMs: {artifacts_dir() / 'libvirt'}/*/qemu/*-console.log")


async def run(cluster: ControlPlane, lab: NodeLab, workdir: Path) -> None:
    operators: list[OperatorProcess] = []
    log_dir = artifacts_dir() / "demo-operators"
    log_dir.mkdir(parents=True, exist_ok=True)

    def start_operator(module: str, env: dict[str, str]) -> OperatorProcess:
        process = OperatorProcess(module, str(cluster.kubeconfig), log_dir, namespaces=[NAMESPACE], env=env)
        operators.append(process.start())
        say(f"  operator {module:<20} logs in {log_dir}, metrics on 127.0.0.1:{process.metrics_port}/metrics")
        return process

    left: list[str] = []
    try:
        async with Kube.connect("capfleet-demo", str(cluster.kubeconfig)) as kube:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await kube.create_or_get(resources.NAMESPACES, namespace)
            async with open_node_site(
                kube=kube,
                namespace=NAMESPACE,
                control_plane=cluster,
                lab=lab,
                start_operator=start_operator,
                workdir=workdir,
                cluster_name=CLUSTER,
            ) as site:
                say(f"\nApplying {VM_TEMPLATE} (variables filled in) in namespace {NAMESPACE}.")
                say(site.apply(site.manifest()))
                await show(site, time.monotonic())
                if sys.stdin.isatty() and not os.environ.get("CI"):
                    await asyncio.to_thread(input, "\nPress Enter to delete the cluster and tear down. ")
                say("Deleting the Cluster: Nodes drained, VMs destroyed, volumes and addresses released...")
                await site.delete_cluster()
                left = await leftovers(site)
    finally:
        for process in operators:
            process.stop()
    if left:
        raise LeftBehind("the cluster's deletion left: " + "; ".join(left))
    say("Torn down and checked: no domain or volume of the cluster in libvirt, no address or claim left.")


def main() -> None:
    say("capfleet demo: a Kubernetes cluster of real nodes (a control-plane VM and a worker VM).\n")
    if os.environ.get("CAPFLEET_TEST_KUBECONFIG"):
        say("(CAPFLEET_TEST_KUBECONFIG is ignored: the demo runs CAPI's managers on its own control plane.)")
    image = ensure_node_image(progress=say)
    say(f"Node image: {image.qcow2}")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(ControlPlane())
        say(f"Control plane: {cluster.server}")
        stack.enter_context(CapiManagers(cluster))
        say("Cluster API v1.11 managers: core, kubeadm bootstrap, kubeadm control plane")
        network = stack.enter_context(PxeNetwork())
        lab = NodeLab(network, image.qcow2).start()
        stack.callback(lab.stop)
        say(f"Lab network {network.network} in namespace {network.name}, hypervisors: "
            + ", ".join(hv.name for hv in lab.hypervisors))  # fmt: skip
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="capfleet-demo-")))
        try:
            asyncio.run(run(cluster, lab, workdir))
        except LeftBehind as e:
            say(f"\nFAILED: {e}")
            sys.exit(1)


if __name__ == "__main__":
    main()
