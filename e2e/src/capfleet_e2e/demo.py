"""`make demo`: a hybrid cluster from `kubectl apply` to provisioned machines, on this machine alone.

It starts what a data centre and a management cluster would have, all local and real: a control plane
(etcd, kube-apiserver, kube-controller-manager), Cluster API's managers, a libvirtd behind sshd, a PXE
network with a Redfish emulator and one bare-metal "server" (a QEMU VM), NetBox (the API test server
seeded with that server, or the real NetBox in CAPFLEET_NETBOX_URL / CAPFLEET_NETBOX_TOKEN) and the five
capfleet operators as subprocesses. Then it applies deploy/examples/hybrid-demo.yaml (one control-plane
VM, one bare-metal worker, addresses from an in-cluster IPPool), waits until both machines are
provisioned and prints the cluster as a tree with every object's conditions.

The machines run capfleet's test OS: it reports the cloud-init data it received and idles. It has no
kubelet, so the demo plays `kubeadm init` on a stand-in API server and no Node ever joins; the Machines
stop at phase Provisioned. Interactive runs stay up until Enter; then everything is deleted and stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.netboot import ensure_netboot_image
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.libvirt.hypervisor import start_hypervisor
from capfleet_e2e.libvirt.image import ensure_test_image
from capfleet_e2e.netbox.fixtures import (
    REAL_TOKEN_ENV,
    REAL_URL_ENV,
    NetboxInstance,
    config_with_tokens,
    instance_for,
    real_netbox,
)
from capfleet_e2e.netbox.server import NetboxTestServer
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.site import DEMO_MANIFEST, open_site
from capfleet_e2e.tree import cluster_tree

NAMESPACE = "capfleet-demo"
CLUSTER = "hybrid"


def say(text: str = "") -> None:
    print(text, flush=True)


@contextlib.contextmanager
def demo_netbox() -> Iterator[NetboxInstance]:
    if os.environ.get(REAL_URL_ENV) and os.environ.get(REAL_TOKEN_ENV):
        yield from real_netbox(None)
        return
    server = NetboxTestServer(config_with_tokens()).start()
    try:
        yield instance_for(server)
    finally:
        server.stop()


async def run(cluster: ControlPlane, netbox: NetboxInstance, lab: PxeLab, workdir: Path) -> None:
    hypervisor = start_hypervisor("demo-hv", "fd-demo", pool_size_mib=2048)
    operators: list[OperatorProcess] = []
    log_dir = artifacts_dir() / "demo-operators"
    log_dir.mkdir(parents=True, exist_ok=True)

    def start_operator(module: str, env: dict[str, str]) -> OperatorProcess:
        process = OperatorProcess(module, str(cluster.kubeconfig), log_dir, namespaces=[NAMESPACE], env=env)
        operators.append(process.start())
        say(f"  operator {module:<20} logs in {log_dir}, metrics on 127.0.0.1:{process.metrics_port}/metrics")
        return process

    try:
        async with Kube.connect("capfleet-demo", str(cluster.kubeconfig)) as kube:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await kube.create_or_get(resources.NAMESPACES, namespace)
            async with open_site(
                kube=kube,
                namespace=NAMESPACE,
                control_plane=cluster,
                hypervisor=hypervisor,
                vm_image=ensure_test_image(),
                pxe_lab=lab,
                servers=lab.define_servers(1, prefix="demo"),
                netboot=ensure_netboot_image(),
                netbox=netbox,
                start_operator=start_operator,
                workdir=workdir,
                cluster_name=CLUSTER,
            ) as site:
                say(f"\nApplying {DEMO_MANIFEST} (variables filled in) in namespace {NAMESPACE}:")
                say(site.apply(site.manifest()))
                started = time.monotonic()
                say("Waiting for the control-plane VM, then the bare-metal worker (minutes without KVM)...")
                await site.bring_up()
                say(f"Both machines provisioned {time.monotonic() - started:.0f} s after kubectl apply.\n")
                say(await cluster_tree(kube, NAMESPACE, CLUSTER))
                kubectl = cluster.kubectl.binary
                say("\nLook around while this runs:")
                say(f"  export KUBECONFIG={cluster.kubeconfig}")
                say(f"  {kubectl} get cluster-api,capfleet -n {NAMESPACE}")
                say(f"  {kubectl} describe hybridmachines -n {NAMESPACE}")
                say(f"  NetBox: {netbox.url}   operator logs: {log_dir}")
                if sys.stdin.isatty() and not os.environ.get("CI"):
                    await asyncio.to_thread(input, "\nPress Enter to delete the cluster and tear down. ")
                say("Deleting the Cluster: VM destroyed, server powered off, device and IPs released...")
    finally:
        for process in operators:
            process.stop()
        hypervisor.stop()
    say("Torn down: nothing left in libvirt, NetBox or on the BMC; every process stopped.")


def main() -> None:
    say("capfleet demo: a hybrid cluster (one VM control plane, one bare-metal worker) with Cluster API.\n")
    if os.environ.get("CAPFLEET_TEST_KUBECONFIG"):
        say("(CAPFLEET_TEST_KUBECONFIG is ignored: the demo runs CAPI's managers on its own control plane.)")
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(ControlPlane())
        say(f"Control plane: {cluster.server}")
        stack.enter_context(CapiManagers(cluster))
        say("Cluster API v1.11 managers: core, kubeadm bootstrap, kubeadm control plane")
        netbox = stack.enter_context(demo_netbox())
        say(f"NetBox: {netbox.url} ({'real' if netbox.real else 'API test server'})")
        lab = stack.enter_context(PxeLab("demo"))
        say("PXE network with dnsmasq and the Redfish emulator: up")
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="capfleet-demo-")))
        asyncio.run(run(cluster, netbox, lab, workdir))


if __name__ == "__main__":
    main()
