"""`make demo`: a hybrid Kubernetes cluster of real nodes, a control-plane VM and a bare-metal worker, from
`kubectl apply` to Nodes Ready.

It starts what a data centre and a management cluster would have, all local and real: a control plane
(etcd, kube-apiserver, kube-controller-manager), Cluster API's managers, a private lab network with PXE
(dnsmasq), two hypervisors (libvirtd behind sshd) and a QEMU "server" behind a Redfish BMC (sushy-tools),
that server recorded as a free device in a real NetBox (4.4.10), and capfleet's five
operators as subprocesses. It renders deploy/clusterctl/cluster-template.yaml, the default flavor (node
addresses and the API's VIP from in-cluster HybridIPPools, the worker a bare-metal server), and applies
it. The control-plane VM boots capfleet's node image (built on first use: `make node-image`); the server is
claimed from NetBox, network-boots capfleet's deploy ramdisk (`make deploy-ramdisk`), which writes the
node image to its disk, and is power-cycled onto it; real cloud-init runs Cluster API's `kubeadm init`
and `kubeadm join`. `CAPFLEET_DEMO_WORKER=vm` makes the worker a VM instead. The demo waits until both
Nodes are Ready and both Machines Running, prints the workload cluster's Nodes, the Machines and the
cluster tree, and says how to reach the workload cluster and how to sign in to the console (capfleet's web
UI, started beside the operators, with a VMQuota and a user in the demo's namespace; its VMs and cluster
pages are saved as screenshots when Chromium is installed). Interactive runs stay up until Enter; then it
deletes the cluster and checks that libvirt holds no domain or volume of it, that every address went back
to its pool and that the server's NetBox device is free again, and fails naming what was left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from capfleet import resources
from capfleet.kube import Kube
from capfleet.tree import cluster_tree
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.console import CHROMIUM, DemoConsole, demo_console
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.labimage import lab_qcow2
from capfleet_e2e.metalsite import HYBRID_TEMPLATE, NODE_SERVER, open_metal
from capfleet_e2e.netbox.fixtures import NetboxInstance, RealNetboxes, instance_behind
from capfleet_e2e.netbox.proxy import NetboxProxy
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE
from capfleet_e2e.nodesite import VM_TEMPLATE, NodeLab, NodeSite, open_node_site
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.waiting import eventually
from capfleet_images.deployramdisk.build import DeployRamdisk, ensure_deploy_ramdisk
from capfleet_images.nodeimage.build import NodeImage, ensure_node_image

NAMESPACE = "capfleet-demo"
CLUSTER = "demo"
WORKER_ENV = "CAPFLEET_DEMO_WORKER"


@dataclass
class MetalParts:
    """The bare-metal worker's surroundings: the PXE lab, its server, NetBox, the deploy ramdisk."""

    pxe_lab: PxeLab
    server: BareMetalServer
    netbox: NetboxInstance
    deploy_ramdisk: DeployRamdisk
    node_image: NodeImage

    def device_free(self) -> bool:
        found = self.netbox.client.list_all("dcim/devices/", name=self.server.name)
        return bool(found) and found[0]["status"]["value"] == "inventory"

    def vm_records(self) -> list[str]:
        """The names of the virtual machines recorded in NetBox (the cluster's VMs, while they exist)."""
        return [vm["name"] for vm in self.netbox.client.list_all("virtualization/virtual-machines/")]

    def record_links(self) -> list[str]:
        """Web UI pages of the claimed server and of the VM records."""
        device = self.netbox.client.list_all("dcim/devices/", name=self.server.name)
        vms = self.netbox.client.list_all("virtualization/virtual-machines/")
        return [f"{self.netbox.url}/dcim/devices/{d['id']}/  (server {d['name']})" for d in device] + [
            f"{self.netbox.url}/virtualization/virtual-machines/{vm['id']}/  (VM {vm['name']})" for vm in vms
        ]


def console_env(lab: NodeLab) -> dict[str, str]:
    """The Create VM form offers the node image and puts VMs on the lab network."""
    return {
        "CAPFLEET_CONSOLE_IMAGES": lab.volume,
        "CAPFLEET_CONSOLE_INTERFACE": f"bridge:{lab.network.bridge}",
    }


def say(text: str = "") -> None:
    print(text, flush=True)


class LeftBehind(RuntimeError):
    """The cluster's deletion left something behind."""


async def leftovers(site: NodeSite, metal: MetalParts | None) -> list[str]:
    """What the deleted cluster left: libvirt domains and volumes, addresses, claims, a claimed device,
    NetBox records of VMs."""
    found = site.leftovers()
    for resource in (resources.IP_ADDRESSES, resources.IP_ADDRESS_CLAIMS):
        found += [f"{o['kind']} {o['metadata']['name']}" for o in await site.kube.list(resource, NAMESPACE)]
    if metal is not None and not metal.device_free():
        found.append(f"NetBox device {metal.server.name} still claimed")
    if metal is not None:
        found += [f"NetBox virtual machine {name}" for name in metal.vm_records()]
    return found


async def show(site: NodeSite, started: float, metal: MetalParts | None, console: DemoConsole) -> None:
    say("Waiting for the control-plane Node and KCP's checks of it (minutes: the VMs run without KVM)...")
    await site.add_workers(1)
    say(f"  control plane Ready and healthy {time.monotonic() - started:.0f} s after kubectl apply")
    say(f"  worker added, as by: kubectl scale machinedeployment {CLUSTER}-md-0 -n {NAMESPACE} --replicas=1")
    await eventually("both Nodes to be Ready", lambda: site.ready_nodes(2), 1200, 10)
    await eventually("both Machines to be Running", lambda: site.running(2), 600, 3)
    took = time.monotonic() - started
    say(f"  both Nodes Ready and both Machines Running {took:.0f} s after kubectl apply\n")
    say("$ kubectl get nodes -o wide      # the workload cluster")
    say(site.workload("get", "nodes", "-o", "wide"))
    say(f"$ kubectl get machines -n {NAMESPACE}      # the management cluster")
    say(site.cp.kubectl("get", "machines", "-n", NAMESPACE))
    say(await cluster_tree(site.kube, NAMESPACE, CLUSTER))
    if CHROMIUM.exists():
        shots = await console.screenshots(CLUSTER)
        say("The console's VMs and cluster pages, as the demo user sees them: " + ", ".join(map(str, shots)))
    say("\nLook around while this runs:")
    say(f"  console:            {console.url}  (sign in with the token in {console.token_file}:")
    say(f"                      ServiceAccount {NAMESPACE}/demo-user, bound to capfleet-console-user)")
    say(f"  workload cluster:   export KUBECONFIG={site.workload.kubeconfig}; kubectl get pods -A")
    say(f"                      (its API at {site.access.server} is relayed to the VIP")
    say(f"                      {site.variables['CONTROL_PLANE_ENDPOINT_HOST']}:6443 inside the lab network)")
    say(f"  management cluster: export KUBECONFIG={site.cp.kubeconfig}; kubectl get cluster-api,capfleet -A")
    say(f"  console logs of the VMs: {artifacts_dir() / 'libvirt'}/*/qemu/*-console.log")
    if metal is not None:
        say("  NetBox records:     " + "\n                      ".join(metal.record_links()))


async def run(cluster: ControlPlane, lab: NodeLab, workdir: Path, metal: MetalParts | None) -> None:
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
            async with (
                open_node_site(
                    kube=kube,
                    namespace=NAMESPACE,
                    control_plane=cluster,
                    lab=lab,
                    start_operator=start_operator,
                    workdir=workdir,
                    cluster_name=CLUSTER,
                ) as site,
                contextlib.AsyncExitStack() as stack,
            ):
                # The worker is added once the control plane is Ready: on two cores without KVM, a worker
                # booting beside `kubeadm init` starves it past kubeadm's fixed API timeouts.
                manifest = site.manifest(WORKER_MACHINE_COUNT="0")
                if metal is not None:
                    parts = await stack.enter_async_context(
                        open_metal(
                            site,
                            pxe_lab=metal.pxe_lab,
                            servers=[metal.server],
                            netbox=metal.netbox,
                            deploy_ramdisk=metal.deploy_ramdisk,
                            node_image=metal.node_image,
                            start_operator=start_operator,
                            workdir=workdir / "metal",
                        )
                    )
                    manifest = parts.cluster(site, record_vms=True, WORKER_MACHINE_COUNT="0")
                    say(f"\nApplying {HYBRID_TEMPLATE} with a bare-metal worker (server {metal.server.name},"
                        f" BMC {metal.server.bmc_address}) in namespace {NAMESPACE}.")  # fmt: skip
                else:
                    say(f"\nApplying {VM_TEMPLATE} (variables filled in) in namespace {NAMESPACE}.")
                console = await stack.enter_async_context(
                    demo_console(cluster, kube, NAMESPACE, workdir, console_env(lab))
                )
                say(site.apply(manifest))
                await show(site, time.monotonic(), metal, console)
                if sys.stdin.isatty() and not os.environ.get("CI"):
                    await asyncio.to_thread(input, "\nPress Enter to delete the cluster and tear down. ")
                say("Deleting the Cluster: Nodes drained, VMs destroyed, volumes and addresses released...")
                await site.delete_cluster()
                left = await leftovers(site, metal)
    finally:
        for process in operators:
            process.stop()
    if left:
        raise LeftBehind("the cluster's deletion left: " + "; ".join(left))
    say("Torn down and checked: no domain or volume of the cluster in libvirt, no address or claim left.")


def main() -> None:
    metal_worker = os.environ.get(WORKER_ENV, "metal") != "vm"
    worker = "a bare-metal worker" if metal_worker else "a worker VM"
    say(f"capfleet demo: a Kubernetes cluster of real nodes (a control-plane VM and {worker}).\n")
    if os.environ.get("CAPFLEET_TEST_KUBECONFIG"):
        say("(CAPFLEET_TEST_KUBECONFIG is ignored: the demo runs CAPI's managers on its own control plane.)")
    image = ensure_node_image(progress=say)
    lab_image = lab_qcow2(image)
    say(f"Node image: {image.qcow2} (the lab's VMs boot {lab_image.name}: TCG guests' kernel arguments)")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(ControlPlane())
        say(f"Control plane: {cluster.server}")
        stack.enter_context(CapiManagers(cluster))
        say("Cluster API v1.11 managers: core, kubeadm bootstrap, kubeadm control plane")
        pxe_lab = stack.enter_context(PxeLab("demo"))
        network = pxe_lab.network
        lab = NodeLab(network, lab_image).start()
        stack.callback(lab.stop)
        say(f"Lab network {network.network} in namespace {network.name}, hypervisors: "
            + ", ".join(hv.name for hv in lab.hypervisors))  # fmt: skip
        metal = stack.enter_context(metal_parts(pxe_lab, image)) if metal_worker else None
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="capfleet-demo-")))
        try:
            asyncio.run(run(cluster, lab, workdir, metal))
        except LeftBehind as e:
            say(f"\nFAILED: {e}")
            sys.exit(1)


@contextlib.contextmanager
def metal_parts(pxe_lab: PxeLab, image: NodeImage) -> Iterator[MetalParts]:
    """A server behind the lab's Redfish emulator, NetBox, and the deploy ramdisk (built if missing)."""
    ramdisk = ensure_deploy_ramdisk(progress=say)
    say(f"Deploy ramdisk: {ramdisk.directory}")
    (server,) = pxe_lab.define_servers(1, prefix="metal", shape=NODE_SERVER)
    say(f"Server {server.name} (MAC {server.mac}) behind Redfish at {server.redfish_url}")
    log_dir = artifacts_dir() / "netbox"
    log_dir.mkdir(parents=True, exist_ok=True)
    netboxes = RealNetboxes(log_dir)
    try:
        say(f"NetBox {DEFAULT_RELEASE}: installing (the first time only: several minutes) and starting it")
        netbox = netboxes.get(DEFAULT_RELEASE)
        password = log_dir / "admin-password"
        password.touch(mode=0o600)
        password.write_text(netbox.admin_password + "\n")
        with NetboxProxy(netbox.url, static=netbox.static) as proxy:
            say(
                f"NetBox {netbox.version}, web UI and API at {proxy.url} (user admin, password in {password})"
            )
            yield MetalParts(pxe_lab, server, instance_behind(proxy, netbox), ramdisk, image)
    finally:
        netboxes.stop()
        pxe_lab.remove_servers([server])


if __name__ == "__main__":
    main()
