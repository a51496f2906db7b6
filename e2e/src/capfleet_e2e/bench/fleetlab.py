"""The scale lab `make bench-fleet` runs capfleet's side against, and the cluster it applies there.

Bare-metal servers are sushy-tools' fake Systems recorded in NetBox; VMs are real QEMU domains on one test
hypervisor (a private libvirtd behind its own sshd, its bridge in a network namespace of the run) booting a
disk that halts at once (capfleet_e2e.libvirt.haltdisk). The cluster is cluster-template-baremetal.yaml with
cluster-template-vm.yaml's worker MachineDeployment beside its own, both rendered from the shipped files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.baremetal.netns import PxeNetwork
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.libvirt.haltdisk import halting_disk
from capfleet_e2e.libvirt.hypervisor import Hypervisor, start_hypervisor, upload_volume
from capfleet_e2e.site import BMC_FIELD, ensure_custom_fields, render
from capfleet_e2e.workload import WorkloadAPIServer

Obj = dict[str, Any]
CLUSTER = "fleet"
TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template-baremetal.yaml"
VM_TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template-vm.yaml"
METAL_DEPLOYMENT, VM_DEPLOYMENT = f"{CLUSTER}-md-0", f"{CLUSTER}-md-vm"
HYPERVISOR_POOL = "bench"
HYPERVISOR_LABELS = {"capfleet.dev/hypervisor-pool": HYPERVISOR_POOL}
VM_IMAGE = "capfleet-halt.raw"
NETBOX_VM_CLUSTER = "bench-vms"
POOL_MIB = 1024
# One host CPU and a 1 GiB pool carry every VM: the guests halt at once and their disks are thin.
LIBVIRT_ENV = {
    "CAPFLEET_LIBVIRT_DOMAIN_TYPE": "qemu",
    "CAPFLEET_VCPU_OVERCOMMIT": "1000",
    "CAPFLEET_STORAGE_OVERCOMMIT": "10000",
}
KUBERNETES_VERSION = "v1.33.0"


def seed_servers(netbox: Any, systems: Sequence[Obj], bmc_address: str) -> None:
    """The fake servers in NetBox: the first as the control plane's role, the rest as workers; and the
    virtualization cluster the VMs are recorded in."""
    ensure_custom_fields(netbox)
    roles = ["k8s-control-plane", "k8s-worker"]
    netbox.seed(
        {
            "cluster_types": [{"name": "libvirt", "slug": "libvirt"}],
            "clusters": [{"name": NETBOX_VM_CLUSTER, "type": "libvirt"}],
            "sites": [{"name": "bench", "slug": "bench"}],
            "manufacturers": [{"name": "fake", "slug": "fake"}],
            "device_roles": [{"name": role, "slug": role} for role in roles],
            "device_types": [{"manufacturer": "fake", "model": "server", "slug": "server"}],
            "devices": [
                {
                    "name": system["name"],
                    "serial": system["uuid"],
                    "site": "bench",
                    "role": roles[0] if index == 0 else roles[1],
                    "device_type": "server",
                    "status": "inventory",
                    "custom_fields": {BMC_FIELD: bmc_address},
                    "interfaces": [{"name": "eno1", "mac_address": system["nics"][0]["mac"]}],
                }
                for index, system in enumerate(systems)
            ],
        }
    )


def fleet_variables(workload: WorkloadAPIServer) -> dict[str, str]:
    """cluster-template-baremetal.yaml's variables: one control-plane server, no worker yet."""
    return {
        "CLUSTER_NAME": CLUSTER,
        "NAMESPACE": "bench-fleet",
        "KUBERNETES_VERSION": KUBERNETES_VERSION,
        "CONTROL_PLANE_MACHINE_COUNT": "1",
        "WORKER_MACHINE_COUNT": "0",
        "CONTROL_PLANE_ENDPOINT_HOST": workload.host,
        "CAPFLEET_NODE_IP_RANGE": "10.96.0.1-10.96.15.254",
        "CAPFLEET_NODE_IP_PREFIX": "20",
        "CAPFLEET_NODE_GATEWAY": "10.96.0.254",
        "CAPFLEET_NAMESERVER": "10.96.0.254",
        "CAPFLEET_IMAGE_URL": "http://images.invalid/node.raw",
        # Never downloaded (the fake ramdisk writes no disk); a SHA-256 of something, as the API requires.
        "CAPFLEET_IMAGE_CHECKSUM": hashlib.sha256(b"capfleet scale lab").hexdigest(),
        "CAPFLEET_BMC_SYSTEM_PATH": "/redfish/v1/Systems/{name}",
        "CAPFLEET_BMC_NETWORK": "127.0.0.0/8",
        "CAPFLEET_NETBOX_SECRET": "netbox",
        "CAPFLEET_BMC_CREDENTIALS_SECRET": "bmc",
    }


def vm_variables(network: PxeNetwork) -> dict[str, str]:
    """cluster-template-vm.yaml's variables for the VM workers: the smallest VM the API takes."""
    return {
        "CAPFLEET_VM_IMAGE": VM_IMAGE,
        "CAPFLEET_VM_BRIDGE": network.bridge,
        "CAPFLEET_HYPERVISOR_POOL": HYPERVISOR_POOL,
        "CAPFLEET_WORKER_VCPUS": "1",
        "CAPFLEET_WORKER_MEMORY_MIB": "64",
        "CAPFLEET_WORKER_DISK_GIB": "1",
    }


def fleet_objects(workload: WorkloadAPIServer, network: PxeNetwork) -> list[Obj]:
    """The cluster of cluster-template-baremetal.yaml, its HybridCluster also placing VMs and recording
    them in NetBox, and cluster-template-vm.yaml's worker MachineDeployment (with its templates) beside
    the bare-metal one as `md-vm`, both at zero replicas. The stand-in workload API server listens on a
    loopback port of its own, so the endpoint is set rather than allocated as the VIP on port 6443."""
    variables = {**fleet_variables(workload), **vm_variables(network)}
    rendered = yaml.safe_load_all(render((repo_root() / TEMPLATE).read_text(), variables))
    objects = [o for o in rendered if o and o["metadata"]["name"] != f"{CLUSTER}-control-plane-endpoint"]
    for obj in objects:
        if obj["kind"] == "HybridCluster":
            obj["spec"]["hypervisorSelector"] = {"matchLabels": HYPERVISOR_LABELS}
            obj["spec"]["netbox"]["cluster"] = NETBOX_VM_CLUSTER
            del obj["spec"]["controlPlaneEndpointPoolRef"]
            obj["spec"]["controlPlaneEndpoint"] = {"host": workload.host, "port": workload.port}
    worker_kinds = {"MachineDeployment", "HybridMachineTemplate", "KubeadmConfigTemplate"}
    vm_docs = yaml.safe_load_all(render((repo_root() / VM_TEMPLATE).read_text(), variables))
    for obj in vm_docs:
        if obj and obj["kind"] in worker_kinds and obj["metadata"]["name"] == METAL_DEPLOYMENT:
            objects.append(json.loads(json.dumps(obj).replace(METAL_DEPLOYMENT, VM_DEPLOYMENT)))
    return objects


@contextlib.contextmanager
def hypervisor_lab() -> Iterator[tuple[PxeNetwork, Hypervisor]]:
    """One test hypervisor in a network namespace of its own (whose bridge the VMs' NICs join), with the
    halting disk as the VMs' base image."""
    with PxeNetwork() as network:
        hypervisor = start_hypervisor("bench-hv", pool_size_mib=POOL_MIB, netns=network.name, reaper=True)
        try:
            conn = hypervisor.connect()
            try:
                # A fresh libvirtd probes every QEMU binary at its first capabilities call: done here, not
                # in libvirt-vm's first call (over a minute on a busy machine, past its call timeout).
                conn.getCapabilities()
                upload_volume(conn, hypervisor.pool_name, VM_IMAGE, halting_disk(), "raw")
            finally:
                conn.close()
            yield network, hypervisor
        finally:
            hypervisor.stop()
