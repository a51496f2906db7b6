"""A management cluster that makes clusters of real Kubernetes nodes on VMs, and the lab around it.

The suites with real nodes and `make demo` need: two hypervisors whose VMs share one L2 network (the PXE
lab's namespace and bridge, where bare-metal servers live too), the node image as their base volume,
the three operators a VM cluster uses, the workload cluster's CA and loopback kubeconfig (see
workload_access.py), and the variables of deploy/clusterctl/cluster-template-vm.yaml, the template users
render with clusterctl. `NodeLab` is the session-wide part, `open_node_site` the per-cluster part.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet.resources import KCPS, MACHINE_DEPLOYMENTS
from capfleet_e2e.baremetal.netns import PxeNetwork
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import HarnessError, Kubectl, repo_root
from capfleet_e2e.labguest import with_lab_guest
from capfleet_e2e.labtuning import LONE, TcgTuning, tuned
from capfleet_e2e.libvirt.hypervisor import Hypervisor, start_hypervisor
from capfleet_e2e.site import OPERATOR_ENV, SITE_LABEL, delete_cluster, register_hypervisor, render
from capfleet_e2e.waiting import eventually
from capfleet_e2e.workload_access import WorkloadAccess
from capfleet_images.nodeimage.versions import NodeImageVersions

VM_TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template-vm.yaml"
POOL_LABEL = "capfleet.dev/hypervisor-pool"
FAILURE_DOMAIN_LABEL = "capfleet.dev/failure-domain"
API_PORT = 6443
VM_OPERATORS = ("capi_machine_glue", "ipam_address", "libvirt_vm")
# Both lab hypervisors run on this machine's cores, and each reports all of them (two here): without
# overcommit one two-vCPU control-plane VM fills a hypervisor, and three replicas (four during a rolling
# update with maxSurge 1) could never be placed.
NODE_OPERATOR_ENV = {
    **OPERATOR_ENV,
    "libvirt_vm": {**OPERATOR_ENV["libvirt_vm"], "CAPFLEET_VCPU_OVERCOMMIT": "4"},
}
StartOperator = Callable[[str, dict[str, str]], object]
KCP_HEALTH = ("Available", "EtcdClusterHealthy", "ControlPlaneComponentsHealthy")
CONTROL_PLANE_NODE_LABEL = "node-role.kubernetes.io/control-plane"


def place_base_volume(hv: Hypervisor, image: Path, volume: str) -> None:
    """`image` as volume `volume` of the hypervisor's pool, copied once (the pool is a directory here)."""
    target = hv.daemon.pool_dir / volume
    if not target.exists():
        subprocess.run(["cp", "--reflink=auto", str(image), str(target.with_suffix(".part"))], check=True)
        target.with_suffix(".part").rename(target)
    conn = hv.connect()
    try:
        conn.storagePoolLookupByName(hv.pool_name).refresh(0)
    finally:
        conn.close()


@dataclass
class NodeLab:
    """Hypervisors in the lab network with the node image in their pools; `start()`/`stop()`."""

    network: PxeNetwork
    image: Path
    names: tuple[str, ...] = ("node-hv-1", "node-hv-2")
    hypervisors: list[Hypervisor] = field(default_factory=list)

    @property
    def volume(self) -> str:
        return f"capfleet-node-{self.image.parent.name}-{self.image.stem}.qcow2"

    def start(self) -> Self:
        try:
            for index, name in enumerate(self.names, start=1):
                hv = start_hypervisor(name, f"fd-{index}", netns=self.network.name)
                self.hypervisors.append(hv)
                place_base_volume(hv, self.image, self.volume)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        while self.hypervisors:
            self.hypervisors.pop().stop()

    def address(self, host: int) -> str:
        """Address `.host` of the lab network (the bridge, the gateway of the nodes, is .1)."""
        return str(self.network.network.network_address + host)

    def domains(self, namespace: str) -> list[str]:
        """Domains of `namespace`'s VMs on every hypervisor (libvirt-vm names them `<namespace>_<name>`)."""
        found = []
        for hv in self.hypervisors:
            conn = hv.connect()
            try:
                found += [d.name() for d in conn.listAllDomains(0) if d.name().startswith(f"{namespace}_")]
            finally:
                conn.close()
        return found

    def volumes(self, namespace: str) -> list[str]:
        """Volumes of `namespace`'s VMs (disks and seeds) left in any pool."""
        found = []
        for hv in self.hypervisors:
            conn = hv.connect()
            try:
                pool = conn.storagePoolLookupByName(hv.pool_name)
                pool.refresh(0)
                found += [name for name in pool.listVolumes() if name.startswith(f"{namespace}_")]
            finally:
                conn.close()
        return found


def template_variables(
    lab: NodeLab, cluster_name: str, namespace: str, *, control_planes: int = 1, workers: int = 1
) -> dict[str, str]:
    """The values of cluster-template-vm.yaml's variables for a cluster in this lab."""
    versions = NodeImageVersions()
    network: ipaddress.IPv4Network = lab.network.network
    return {
        "CLUSTER_NAME": cluster_name,
        "NAMESPACE": namespace,
        "KUBERNETES_VERSION": versions.kubernetes,
        "CONTROL_PLANE_MACHINE_COUNT": str(control_planes),
        "WORKER_MACHINE_COUNT": str(workers),
        "CONTROL_PLANE_ENDPOINT_HOST": lab.address(10),
        "CAPFLEET_NODE_IP_RANGE": f"{lab.address(20)}-{lab.address(60)}",
        "CAPFLEET_NODE_IP_PREFIX": str(network.prefixlen),
        "CAPFLEET_NODE_GATEWAY": lab.address(1),
        "CAPFLEET_NAMESERVER": lab.address(1),
        "CAPFLEET_VM_IMAGE": lab.volume,
        "CAPFLEET_VM_BRIDGE": lab.network.bridge,
        "CAPFLEET_HYPERVISOR_POOL": namespace,
        "CAPFLEET_IMAGE_REPOSITORY": versions.image_repository,
        # Sized for QEMU without KVM on a 2-core machine: kubeadm's minimum for a control plane.
        "CAPFLEET_CONTROL_PLANE_VCPUS": "2",
        "CAPFLEET_CONTROL_PLANE_MEMORY_MIB": "2048",
        "CAPFLEET_CONTROL_PLANE_DISK_GIB": "8",
        "CAPFLEET_WORKER_VCPUS": "1",
        "CAPFLEET_WORKER_MEMORY_MIB": "1536",
        "CAPFLEET_WORKER_DISK_GIB": "8",
    }


@dataclass
class NodeSite:
    """A management cluster ready for VM cluster `cluster_name` in `namespace`: apply `manifest()`."""

    namespace: str
    cluster_name: str
    kube: Kube
    cp: ControlPlane
    lab: NodeLab
    access: WorkloadAccess
    workload: Kubectl
    variables: dict[str, str]
    operators: dict[str, Any]

    def manifest(self, tuning: TcgTuning = LONE, template: Path = VM_TEMPLATE, **overrides: str) -> str:
        """A shipped cluster template (the vm flavor unless told) rendered with the site's variables,
        `overrides` taking precedence, its nodes set up for the lab (labguest.py) and tuned for TCG
        (labtuning.py)."""
        rendered = render((repo_root() / template).read_text(), {**self.variables, **overrides})
        return with_lab_guest(tuned(rendered, tuning))

    def apply(self, manifest: str) -> str:
        return self.cp.kubectl("apply", "-f", "-", stdin=manifest)

    def with_failure_domains(self, manifest: str) -> str:
        """`manifest` whose HybridCluster declares one control-plane failure domain per lab hypervisor."""
        documents = [d for d in yaml.safe_load_all(manifest) if d]
        for document in documents:
            if document["kind"] == "HybridCluster":
                document["spec"]["failureDomains"] = [
                    {
                        "name": hv.failure_domain,
                        "controlPlane": True,
                        "hypervisorSelector": {"matchLabels": {FAILURE_DOMAIN_LABEL: hv.failure_domain}},
                    }
                    for hv in self.lab.hypervisors
                ]
        return yaml.safe_dump_all(documents, sort_keys=False)

    async def control_plane_healthy(self) -> dict[str, Any] | None:
        """The KubeadmControlPlane once its own checks of the real control plane pass (Available, etcd
        members, static pods): Cluster API has connected to the workload cluster and looked at it."""
        [kcp] = await self.kube.list(KCPS, self.namespace)
        found = {c.get("type"): c.get("status") for c in (kcp.get("status") or {}).get("conditions") or []}
        return kcp if all(found.get(c) == "True" for c in KCP_HEALTH) else None

    async def add_workers(self, replicas: int) -> float:
        """Wait until the control plane's Node is Ready and KCP healthy, then scale the workers'
        MachineDeployment to `replicas`; returns the seconds waited. The suites apply the template with
        no workers: on two cores without KVM, a worker VM booting beside `kubeadm init`, or beside Cluster
        API's first connection to the new cluster, starved the control plane past kubeadm's fixed 10 s
        timeouts and kube-vip's Lease in every run that overlapped."""
        started = time.monotonic()
        await eventually("the control plane's Nodes to be Ready", self.control_plane_nodes_ready, 1500, 10)
        await eventually("KubeadmControlPlane healthy", self.control_plane_healthy, 900, 5)
        waited = time.monotonic() - started
        patch = {"spec": {"replicas": replicas}}
        await self.kube.patch(MACHINE_DEPLOYMENTS, f"{self.cluster_name}-md-0", patch, self.namespace)
        return waited

    def api_ready(self) -> bool:
        """Whether the workload API answers /readyz at its endpoint (through the relay to the VIP)."""
        return self.api_unready_reason() is None

    def api_unready_reason(self) -> str | None:
        """None while the workload API answers /readyz at its endpoint; else why not, in a few words: the
        checks /readyz reports failed (an API server that answers, e.g. without etcd quorum), or that
        nothing answered at the endpoint (no VIP holder, or no API server behind it)."""
        try:
            self.workload("get", "--raw", "/readyz?verbose", "--request-timeout=5s", timeout=15)
        except subprocess.TimeoutExpired:
            return "no answer in 15 s"
        except HarnessError as error:
            return readyz_failure(str(error))
        return None

    async def machines(self) -> list[dict[str, Any]]:
        return await self.kube.list(resources.CAPI_MACHINES, self.namespace)

    async def running(self, count: int) -> list[dict[str, Any]] | None:
        """The Machines once there are `count`, all Running with a nodeRef (else None)."""
        found = await self.machines()
        ok = [
            m for m in found
            if (m.get("status") or {}).get("phase") == "Running" and (m.get("status") or {}).get("nodeRef")
        ]  # fmt: skip
        return found if len(found) == count and len(ok) == count else None

    def nodes(self) -> list[dict[str, Any]]:
        """The workload cluster's Nodes (through the relay); [] while its API does not answer."""
        try:
            text = self.workload("get", "nodes", "-o", "json", "--request-timeout=10s", timeout=30)
        except (HarnessError, subprocess.TimeoutExpired):
            return []
        return list(json.loads(text)["items"])

    async def control_plane_nodes_ready(self) -> list[dict[str, Any]] | None:
        """The control plane's Nodes once there is one and all are Ready (workers may be there too: a
        suite adds workers again after the first ones joined)."""
        nodes = [n for n in self.nodes() if CONTROL_PLANE_NODE_LABEL in (n["metadata"].get("labels") or {})]
        return nodes if nodes and all(node_ready(n) for n in nodes) else None

    async def ready_nodes(self, count: int) -> list[dict[str, Any]] | None:
        nodes = self.nodes()
        ready = [n for n in nodes if node_ready(n)]
        return nodes if len(nodes) == count and len(ready) == count else None

    async def delete_cluster(self, within: float = 600) -> None:
        await delete_cluster(self.kube, self.cluster_name, self.namespace, within)

    def leftovers(self) -> list[str]:
        """What the cluster left in libvirt: domains and volumes of the namespace."""
        return [f"domain {d}" for d in self.lab.domains(self.namespace)] + [
            f"volume {v}" for v in self.lab.volumes(self.namespace)
        ]


# The lab's hypervisors and bare-metal servers all run on this machine's two cores; in a data centre each
# would have its own. Control-plane VMs keep their share: every other lab QEMU (worker VMs, bare-metal
# servers) runs at this niceness, so a node booting or writing its image beside the control plane cannot
# starve the API server, etcd and kube-vip that its own join depends on. libvirt starts each QEMU in a session
# of its own, and with the kernel's autogroup scheduling (the default of most distributions) each session
# is a group that gets an equal share whatever its threads' niceness: the group's own niceness is set too.
WORKER_NICENESS = 10


def session_of(process: Path) -> int:
    """The session ID of /proc/<pid> (the sixth field of its stat, after the command name)."""
    return int((process / "stat").read_text().rsplit(")", 1)[1].split()[3])


def lower_worker_priority(done: set[int]) -> None:
    """Renice every thread of every lab QEMU that is not a control-plane VM (those in `done` excepted),
    and the autogroup of each that leads a session of its own."""
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            argv = (process / "cmdline").read_bytes().split(b"\0")
            tasks = [int(task.name) for task in (process / "task").iterdir()]
        except OSError:
            continue  # gone meanwhile
        if not argv[0].endswith(b"qemu-system-x86_64"):
            continue
        guest = next((a for a in argv if a.startswith(b"guest=")), b"")
        if b"-control-plane-" in guest:
            continue
        if int(process.name) not in done:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if session_of(process) == int(process.name):  # never another session's group
                    (process / "autogroup").write_text(str(WORKER_NICENESS))
        for task in tasks:
            if task not in done:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, task, WORKER_NICENESS)
                done.add(task)


@contextlib.asynccontextmanager
async def control_planes_first(interval: float = 2.0) -> AsyncIterator[None]:
    """While inside, lab QEMUs other than control-plane VMs are reniced as they appear."""
    done: set[int] = set()

    async def keep_lowering() -> None:
        while True:
            await asyncio.to_thread(lower_worker_priority, done)
            await asyncio.sleep(interval)

    task = asyncio.create_task(keep_lowering())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def readyz_failure(kubectl_error: str) -> str:
    """The failed checks in kubectl's error for `/readyz?verbose` ("etcd, etcd-readiness"), or the error's
    last line when the API server did not answer at all (connection refused, timeout)."""
    failed = re.findall(r"\[-\]([\w.-]+) failed", kubectl_error)
    if failed:
        return "failed checks: " + ", ".join(failed)
    stderr = kubectl_error.split("): ", 1)[-1]  # after Kubectl's "kubectl ... failed (N): "
    return "unreachable: " + stderr.strip().splitlines()[-1][:160]


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@contextlib.asynccontextmanager
async def open_node_site(
    *,
    kube: Kube,
    namespace: str,
    control_plane: ControlPlane,
    lab: NodeLab,
    start_operator: StartOperator,
    workdir: Path,
    cluster_name: str = "nodes",
) -> AsyncIterator[NodeSite]:
    """Register the lab's hypervisors, give CAPI the workload's CA and loopback kubeconfig, start the
    three operators; on exit delete the cluster (if still there), wait, and unregister the hypervisors."""
    hypervisor_names = []
    try:
        for hv in lab.hypervisors:
            labels = {SITE_LABEL: namespace, POOL_LABEL: namespace, FAILURE_DOMAIN_LABEL: hv.failure_domain}
            hypervisor_names.append(await register_hypervisor(kube, namespace, hv, labels=labels))
        variables = template_variables(lab, cluster_name, namespace)
        relay_port = lab.network.expose(variables["CONTROL_PLANE_ENDPOINT_HOST"], API_PORT)
        access = WorkloadAccess.through(cluster_name, relay_port)
        for secret in access.secrets(namespace):
            await kube.create(resources.SECRETS, secret, namespace)
        operators = {module: start_operator(module, NODE_OPERATOR_ENV[module]) for module in VM_OPERATORS}
        site = NodeSite(
            namespace,
            cluster_name,
            kube,
            control_plane,
            lab,
            access,
            access.kubectl(workdir),
            variables,
            operators,
        )
        try:
            async with control_planes_first():
                yield site
        finally:
            await site.delete_cluster()
    finally:
        for name in hypervisor_names:
            await kube.delete(kinds.HYPERVISOR.resource, name)
