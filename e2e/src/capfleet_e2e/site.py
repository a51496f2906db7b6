"""A small data centre for hybrid clusters, made of the harness's real parts, and how the fleet reaches it.

The end-to-end suites and `make demo` both need the same things around a management cluster: a
hypervisor registered as a Hypervisor object with its base image, bare-metal servers in the PXE lab
recorded in NetBox with their BMC address and boot MAC, the Secrets a HybridCluster names, the five
operators' settings, and a stand-in workload API server at the cluster's control-plane endpoint. This
module builds those and renders cluster manifests such as deploy/examples/hybrid-demo.yaml.
"""

from __future__ import annotations

import base64
import contextlib
import re
import secrets
import shutil
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.callbacks import Callbacks
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.libvirt.bootdisk import boot_disk
from capfleet_e2e.libvirt.hypervisor import Hypervisor, upload_volume
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.namespaces import delete_namespace
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.serviceaccounts import opt_in
from capfleet_e2e.waiting import eventually
from capfleet_e2e.workload import WorkloadAPIServer

BASE_IMAGE = "capfleet-test-base.qcow2"
LAB_BASE_IMAGES = ("*.qcow2", "*.raw")
"""What the lab's Hypervisors let VMs clone: every qcow2 volume but the VMs' own (whose names carry `_`,
which no pattern matches): the test image, the node image, the benches' halting image, and names that do
not exist."""
LAB_NETWORKS: tuple[dict[str, object], ...] = ({"userMode": True}, {"bridge": "*"}, {"network": "*"})
"""What the lab's Hypervisors let VMs attach to: anything, in every namespace (each test makes its own
bridges); tests of the rule give a Hypervisor a list of their own."""
SITE_LABEL = "capfleet.dev/site"
BMC_FIELD = "bmc_address"
OWNER_FIELD = "capfleet_owner"
PREVIOUS_FIELD = "capfleet_previous"
NETBOX_INSTANCE = "mgmt-e2e"
DEMO_MANIFEST = Path("deploy") / "examples" / "hybrid-demo.yaml"

# How each operator runs in the suites: short polls where the real thing would wait for hardware, and
# TCG for QEMU (this machine's /dev/kvm cannot run the test guests).
OPERATOR_ENV: dict[str, dict[str, str]] = {
    "capi_machine_glue": {"CAPFLEET_GLUE_RESYNC_SECONDS": "30"},
    "ipam_address": {},
    "netbox_device": {
        "CAPFLEET_INSTANCE_NAME": NETBOX_INSTANCE,
        "CAPFLEET_NETBOX_POLL_SECONDS": "1",
        "CAPFLEET_NETBOX_SETTLE_SECONDS": "0.2",
    },
    "libvirt_vm": {
        "CAPFLEET_HYPERVISOR_POLL_SECONDS": "2",
        "CAPFLEET_VM_POLL_SECONDS": "3",
        "CAPFLEET_LIBVIRT_DOMAIN_TYPE": "qemu",
    },
    "baremetal_provision": {"CAPFLEET_BMC_SHUTDOWN_SECONDS": "3", "CAPFLEET_BMC_POWER_WAIT_SECONDS": "20"},
}
OPERATORS = tuple(OPERATOR_ENV)

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")


class MissingVariable(KeyError):
    """A manifest names a variable without a default that was not given."""


def render(text: str, variables: Mapping[str, str]) -> str:
    """`text` with `${VAR}` and `${VAR:=default}` replaced as clusterctl does; every variable must resolve.
    `$$` stands for a `$` that is not a variable (a shell's, in a script a template carries)."""

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in variables:
            return variables[name]
        if default is not None:
            return default
        raise MissingVariable(name)

    return _VARIABLE.sub(value, text)


def b64(value: str | bytes) -> str:
    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


def secret(name: str, data: Mapping[str, str | bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {key: b64(value) for key, value in data.items()},
    }


def _quiet_libvirt(_context: object, _error: object) -> None:
    """libvirt prints every error to stderr by default, including the lookups that are expected to fail."""


def ensure_base_image(hv: Hypervisor, image: TestImage) -> None:
    """The test image's boot disk as volume BASE_IMAGE in the hypervisor's pool (once)."""
    libvirt.registerErrorHandler(_quiet_libvirt, None)
    conn = hv.connect()
    try:
        pool = conn.storagePoolLookupByName(hv.pool_name)
        try:
            pool.storageVolLookupByName(BASE_IMAGE)
        except libvirt.libvirtError:
            upload_volume(conn, hv.pool_name, BASE_IMAGE, boot_disk(image, "qcow2"), "qcow2")
    finally:
        conn.close()


def remove_base_image(hv: Hypervisor) -> None:
    """Remove BASE_IMAGE again: other suites expect the session's pools empty between tests."""
    conn = hv.connect()
    try:
        pool = conn.storagePoolLookupByName(hv.pool_name)
        with contextlib.suppress(libvirt.libvirtError):
            pool.storageVolLookupByName(BASE_IMAGE).delete(0)
    finally:
        conn.close()


def domains_of(hv: Hypervisor, namespace: str) -> list[str]:
    """Domains of `namespace`'s VMs on the hypervisor (libvirt-vm names them `<namespace>_<name>`)."""
    conn = hv.connect()
    try:
        return [d.name() for d in conn.listAllDomains(0) if d.name().startswith(f"{namespace}_")]
    finally:
        conn.close()


Reach = Callable[[int], str]
"""Where the operators reach a service of the host's loopback at a port: the host they connect to (the
port stays). Host processes reach it on loopback; pods on a management node through its relays."""


def on_loopback(_port: int) -> str:
    return "127.0.0.1"


def relocated(url: str, reach: Reach) -> str:
    """`url`, of a service on the host's loopback, as the operators reach it."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname != "127.0.0.1" or parts.port is None:
        raise ValueError(f"not a loopback service with a port: {url}")
    return parts._replace(netloc=f"{reach(parts.port)}:{parts.port}").geturl()


async def register_hypervisor(
    kube: Kube,
    secret_namespace: str,
    hv: Hypervisor,
    *,
    labels: Mapping[str, str] | None = None,
    known_hosts: str | None = None,
    reach: Reach = on_loopback,
    base_images: tuple[str, ...] = LAB_BASE_IMAGES,
    networks: tuple[dict[str, object], ...] = LAB_NETWORKS,
) -> str:
    """Secrets (in `secret_namespace`) and a Hypervisor object for test hypervisor `hv`; returns its name.
    The host key is the sshd's own under the name the operators reach it by."""
    name = f"{hv.name}-{secrets.token_hex(3)}"
    host = reach(hv.sshd.port)
    keys = {
        "ssh-privatekey": hv.sshd.client_private_key,
        "known_hosts": hv.sshd.known_hosts_as(host) if known_hosts is None else known_hosts,
    }
    await kube.create(resources.SECRETS, secret(name, keys), secret_namespace)
    ref = {"name": name, "namespace": secret_namespace}
    body = {
        "apiVersion": kinds.HYPERVISOR.resource.api_version,
        "kind": "Hypervisor",
        "metadata": {"name": name, "labels": {"capfleet.dev/test": secret_namespace, **(labels or {})}},
        "spec": {
            "connection": {
                "host": host,
                "port": hv.sshd.port,
                "user": hv.sshd.user,
                "socketPath": str(hv.daemon.socket_path),
            },
            "sshKeySecretRef": ref,
            "knownHostsSecretRef": ref,
            "failureDomain": hv.failure_domain,
            "storagePool": hv.pool_name,
            "baseImages": list(base_images),
            "networks": list(networks),
        },
    }
    await kube.create(kinds.HYPERVISOR.resource, body)
    return name


def boot_files(image: TestImage, directory: Path) -> Path:
    """A directory baremetal-provision serves under /files/: the installer's kernel and initrd."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in (("kernel", image.kernel), ("initrd", image.initrd)):
        shutil.copyfile(source, directory / name)  # aiohttp serves no symlinks out of its directory
    return directory


Boot = Callable[[PxeLab, Path], tuple[dict[str, str], str, str]]
"""How the lab's servers reach baremetal-provision's boot server, given the lab and a directory with the
installer's files: (the operator's settings, the boot URL the servers use, the URL the files are at)."""


def boot_on_host(pxe_lab: PxeLab, files: Path) -> tuple[dict[str, str], str, str]:
    """The operator's boot server on a UNIX socket behind a boot front on the lab's HTTP address, serving
    the files itself (the host processes' way)."""
    url = pxe_lab.network.http_url().rstrip("/")
    env = {
        **OPERATOR_ENV["baremetal_provision"],
        **pxe_lab.network.serve_boot_front().operator_env(),
        "CAPFLEET_BOOT_URL": url,
        "CAPFLEET_BOOT_FILES_DIR": str(files),
    }
    return env, url, f"{url}/files"


def ensure_custom_fields(netbox: NetboxInstance) -> None:
    """The custom fields and tag capfleet relies on, made as users make them: `capfleet netbox-setup`."""
    netbox.run_setup()


def record_servers(
    netbox: NetboxInstance,
    servers: list[BareMetalServer],
    role: str,
    bmc_addresses: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """The lab's servers as free NetBox devices of `role` (status inventory, BMC URL (Redfish, unless
    `bmc_addresses` names another), boot NIC eno1), and a virtualization cluster for the VMs; returns the
    role's slug and the cluster's name."""
    ensure_custom_fields(netbox)
    netbox.seed(
        {
            "cluster_types": [{"name": "libvirt", "slug": "libvirt"}],
            "clusters": [{"name": "lab-vms", "type": "libvirt"}],
            "sites": [{"name": "lab", "slug": "lab"}],
            "manufacturers": [{"name": "qemu", "slug": "qemu"}],
            "device_roles": [{"name": role, "slug": role}],
            "device_types": [{"manufacturer": "qemu", "model": "pc", "slug": "pc"}],
            "devices": [
                {
                    "name": server.name,
                    "serial": server.uuid,
                    "site": "lab",
                    "role": role,
                    "device_type": "pc",
                    "status": "inventory",
                    "custom_fields": {BMC_FIELD: (bmc_addresses or {}).get(server.name, server.bmc_address)},
                    "interfaces": [{"name": "eno1", "mac_address": server.mac}],
                }
                for server in servers
            ],
        }
    )
    return role, "lab-vms"


def netbox_secret(netbox: NetboxInstance, name: str = "netbox", reach: Reach = on_loopback) -> dict[str, Any]:
    return secret(name, {"url": relocated(netbox.url, reach), "token": netbox.token})


def bmc_secret(server: BareMetalServer, name: str = "bmc") -> dict[str, Any]:
    """The lab's Redfish credentials (one emulator serves every server) and the CA that signed its TLS."""
    return secret(
        name,
        {"username": server.username, "password": server.password, "caBundle": server.ca_cert.read_text()},
    )


def cluster_variables(
    *,
    cluster_name: str,
    endpoint: tuple[str, int],
    vm_callback_url: str,
    files_url: str,
    netboot: TestImage,
    site: str,
    worker_role: str,
    netbox_vm_cluster: str,
    workers: int = 1,
) -> dict[str, str]:
    """The variables of deploy/examples/hybrid-demo.yaml for this site."""
    return {
        "CLUSTER_NAME": cluster_name,
        "CONTROL_PLANE_ENDPOINT_HOST": endpoint[0],
        "CONTROL_PLANE_ENDPOINT_PORT": str(endpoint[1]),
        "HYPERVISOR_SITE": site,
        "VM_CALLBACK_URL": vm_callback_url,
        "INSTALLER_KERNEL_URL": f"{files_url}/kernel",
        "INSTALLER_INITRD_URL": f"{files_url}/initrd",
        "INSTALLER_KERNEL_ARGS": "[" + ", ".join(f'"{a}"' for a in netboot.cmdline.split()) + "]",
        "WORKER_DEVICE_ROLE": worker_role,
        "NETBOX_VM_CLUSTER": netbox_vm_cluster,
        "WORKER_MACHINE_COUNT": str(workers),
    }


async def delete_cluster(kube: Kube, name: str, namespace: str, within: float) -> None:
    """Delete CAPI Cluster `name` and wait until it is gone (with everything it owns). A paused Cluster (a
    test that failed mid-pause) is unpaused first: Cluster API deletes nothing of a paused cluster."""
    cluster = await kube.get(resources.CAPI_CLUSTERS, name, namespace)
    if cluster is not None and (cluster.get("spec") or {}).get("paused"):
        await kube.patch(resources.CAPI_CLUSTERS, name, {"spec": {"paused": False}}, namespace)
    await kube.delete(resources.CAPI_CLUSTERS, name, namespace)

    async def gone() -> bool:
        return await kube.get(resources.CAPI_CLUSTERS, name, namespace) is None

    await eventually(f"Cluster {name} to be deleted", gone, within, interval=1)


CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
CALLBACK_PATH = "/control-plane"
StartOperator = Callable[[str, dict[str, str]], object]


@dataclass
class HybridSite:
    """A management cluster with CAPI, the five operators and a data centre around it, ready for a
    hybrid cluster `cluster_name` in `namespace`: apply `manifest()` and watch."""

    namespace: str
    cluster_name: str
    kube: Kube
    cp: ControlPlane
    hypervisor: Hypervisor
    hypervisor_name: str
    servers: list[BareMetalServer]
    netbox: NetboxInstance
    workload: WorkloadAPIServer
    callbacks: Callbacks
    variables: dict[str, str]
    operators: dict[str, Any]
    """What `start_operator` returned for each operator module (the suites' OperatorProcess)."""
    audit_offset: int = 0
    """Where the API server's audit log stood when the site opened: what the site's own checks read from."""

    def manifest(self, path: Path = DEMO_MANIFEST) -> str:
        return render(path.read_text(), self.variables)

    def apply(self, manifest: str) -> str:
        return self.cp.kubectl("apply", "-n", self.namespace, "-f", "-", stdin=manifest)

    def control_plane_report(self) -> str | None:
        """What the control-plane VM reported of its seed (user-data, meta-data, network-config)."""
        body = self.callbacks.received.get(CALLBACK_PATH)
        return body.decode(errors="replace") if body is not None else None

    async def machines(self, control_plane: bool) -> list[dict[str, Any]]:
        found = await self.kube.list(resources.CAPI_MACHINES, self.namespace)
        return [
            m for m in found if (CONTROL_PLANE_LABEL in (m["metadata"].get("labels") or {})) == control_plane
        ]

    async def provisioned(self, control_plane: bool, count: int = 1) -> list[dict[str, Any]] | None:
        """The `count` Machines of that role once all are in phase Provisioned (else None)."""
        found = await self.machines(control_plane)
        if len(found) != count or not all(
            (m.get("status") or {}).get("phase") == "Provisioned" for m in found
        ):
            return None
        return found

    async def claimed_servers(self) -> dict[str, BareMetalServer]:
        """NetboxDevice name → lab server, for every device claimed now."""
        by_name = {s.name: s for s in self.servers}
        result = {}
        for device in await self.kube.list(kinds.NETBOX_DEVICE.resource, self.namespace):
            name = (device.get("status") or {}).get("name")
            if name in by_name:
                result[device["metadata"]["name"]] = by_name[name]
        return result

    async def bring_up(self, vm_seconds: float = 300, server_seconds: float = 300) -> None:
        """Wait for the control-plane VM's report, play `kubeadm init`, wait for every Machine."""
        report = await eventually("the control-plane VM to report its seed", self._report, vm_seconds)
        if "kubeadm init" not in report:
            raise AssertionError(
                f"the control-plane VM did not receive kubeadm's init config: {report[:400]}"
            )
        self.workload.upload_kubeadm_config()  # what `kubeadm init` would do on a real OS
        await eventually("the control-plane Machine to be Provisioned", lambda: self.provisioned(True), 180)
        workers = int(self.variables.get("WORKER_MACHINE_COUNT", "1"))
        await eventually(
            "the worker Machines to be Provisioned", lambda: self.provisioned(False, workers), server_seconds
        )

    async def _report(self) -> str | None:
        return self.control_plane_report()

    async def delete_cluster(self, within: float = 300) -> None:
        await delete_cluster(self.kube, self.cluster_name, self.namespace, within)

    async def delete_namespace(self, within: float = 300) -> None:
        try:
            await delete_namespace(self.kube, self.namespace, within)
        except AssertionError as exc:
            states = {module: process.running() for module, process in self.operators.items()}
            raise AssertionError(f"{exc}; operators running: {states}") from exc


@contextlib.asynccontextmanager
async def open_site(
    *,
    kube: Kube,
    namespace: str,
    control_plane: ControlPlane,
    hypervisor: Hypervisor,
    vm_image: TestImage,
    pxe_lab: PxeLab,
    servers: list[BareMetalServer],
    netboot: TestImage,
    netbox: NetboxInstance,
    start_operator: StartOperator,
    workdir: Path,
    cluster_name: str = "hybrid",
    reach: Reach = on_loopback,
    boot: Boot = boot_on_host,
    onboard: Callable[[Kubectl, str], object] = opt_in,
) -> AsyncIterator[HybridSite]:
    """Prepare everything a hybrid cluster needs and start the five operators; on exit delete the
    cluster (if still there) and wait, so that nothing outlives the site, then stop the site's parts.
    `reach` and `boot` say how the operators reach the lab and its servers the operators (host processes
    by default; pods on a management node: capfleet_e2e.podfleet); `onboard` opts the namespace in to the
    operators reading its Secrets (deploy/tenant by default)."""
    ensure_base_image(hypervisor, vm_image)
    _, audit_offset = control_plane.audit_events()
    onboard(control_plane.kubectl, namespace)  # the operators may read the site's Secrets, and no others
    hypervisor_name = await register_hypervisor(
        kube, namespace, hypervisor, labels={SITE_LABEL: namespace}, reach=reach
    )
    callbacks = Callbacks()
    workload: WorkloadAPIServer | None = None
    try:
        bmcs = {server.name: relocated(server.bmc_address, reach) for server in servers}
        role, vm_cluster = record_servers(netbox, servers, "worker", bmcs)
        for body in (netbox_secret(netbox, reach=reach), bmc_secret(servers[0])):
            await kube.create(resources.SECRETS, body, namespace)
        baremetal, _, files_url = boot(pxe_lab, boot_files(netboot, workdir / "boot"))
        workload = WorkloadAPIServer(control_plane, cluster_name).start()
        await kube.create(resources.SECRETS, workload.ca_secret(namespace), namespace)
        operators = {
            operator: start_operator(operator, baremetal if operator == "baremetal_provision" else env)
            for operator, env in OPERATOR_ENV.items()
        }
        variables = cluster_variables(
            cluster_name=cluster_name,
            endpoint=(workload.host, workload.port),
            vm_callback_url=f"http://10.0.2.2:{callbacks.port}{CALLBACK_PATH}",
            files_url=files_url,
            netboot=netboot,
            site=namespace,
            worker_role=role,
            netbox_vm_cluster=vm_cluster,
        )
        site = HybridSite(
            namespace,
            cluster_name,
            kube,
            control_plane,
            hypervisor,
            hypervisor_name,
            servers,
            netbox,
            workload,
            callbacks,
            variables,
            operators,
            audit_offset,
        )
        try:
            yield site
        finally:
            await site.delete_cluster()
    finally:
        if workload is not None:
            workload.stop()
        callbacks.close()
        await kube.delete(kinds.HYPERVISOR.resource, hypervisor_name)
        remove_base_image(hypervisor)
