"""Bare-metal workers for a cluster of real nodes: lab servers in NetBox, deployed with the node image.

`open_metal` adds to a `NodeSite` what a hybrid cluster's bare-metal half needs, all real: the lab's QEMU
servers as free NetBox devices of a worker role (with their BMC addresses: Redfish through the emulator,
or IPMI through a virtualbmc when the test gives one, with the same credentials), the NetBox and BMC
Secrets, netbox-device, and baremetal-provision serving capfleet's deploy ramdisk with its image cache,
which fetches the node image's `disk.raw` from an HTTP server on loopback (the servers have no route to
it). `Metal.cluster(site)` is the shipped default flavor, cluster-template.yaml (a control-plane VM,
bare-metal workers), rendered with the site's and the servers' values as a user would, then patched only
where the lab differs from a data centre (`lab_patch`): the boot server's URL per cluster, the disk with
the serial number `ROOT_SERIAL` (a root device hint), and NetBox's VM records when asked for.

NetBox gets each Redfish server's BMC as a bare address (`host:port`), which the template's
`bmcAddressTemplate` turns into a URL (`redfish+https://{address}/redfish/v1/Systems/{serial}`, the serial
being the server's UUID), and each IPMI server's as a full `ipmi://` URL, used as it is: both forms of the
book's Bare-metal servers page, against the Redfish emulator and a virtualbmc.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from capfleet import resources
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer, Shape
from capfleet_e2e.imageserver import image_server, sha256_of
from capfleet_e2e.labtuning import LONE, TcgTuning
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.nodesite import NodeSite
from capfleet_e2e.site import OPERATOR_ENV, bmc_secret, boot_on_host, netbox_secret, record_servers
from capfleet_images.deployramdisk.build import DeployRamdisk
from capfleet_images.nodeimage.build import NodeImage

ROOT_SERIAL = "CAPFLEET-ROOT"
# A worker node: the node image (2.3 GiB) and its seed on a 6 GiB disk; kubelet and containerd in 1.5 GiB.
NODE_SERVER = Shape(memory_mib=1536, disk_mib=6144, disk_serial=ROOT_SERIAL)
WORKER_INTERFACE = "eno1"
BMC_SECRET = "bmc"
# The lab's BMCs (sushy-tools and virtualbmc) listen on loopback: the only network credentials may go to.
LAB_BMC_NETWORK = "127.0.0.0/8"
HYBRID_TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template.yaml"
BAREMETAL_TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template-baremetal.yaml"
REDFISH_SYSTEM_PATH = "/redfish/v1/Systems/{serial}"
METAL_OPERATORS = ("netbox_device", "baremetal_provision")


@dataclass
class Metal:
    """What `open_metal` set up: the servers, where their image comes from, and the NetBox worker role."""

    servers: list[BareMetalServer]
    role: str
    vm_cluster: str  # the NetBox virtualization cluster that VM records go to, when asked for
    image: dict[str, str]
    boot_url: str
    operators: dict[str, Any]

    def template_variables(self) -> dict[str, str]:
        """The bare-metal variables of the default and baremetal flavors for these servers (one NetBox role
        for workers and control planes: the suites decide which servers are free)."""
        return {
            "CAPFLEET_NETBOX_SECRET": "netbox",
            "CAPFLEET_BMC_CREDENTIALS_SECRET": BMC_SECRET,
            "CAPFLEET_BMC_NETWORK": LAB_BMC_NETWORK,
            "CAPFLEET_BMC_SYSTEM_PATH": REDFISH_SYSTEM_PATH,
            "CAPFLEET_WORKER_DEVICE_ROLE": self.role,
            "CAPFLEET_CONTROL_PLANE_DEVICE_ROLE": self.role,
            "CAPFLEET_IMAGE_URL": self.image["url"],
            "CAPFLEET_IMAGE_CHECKSUM": self.image["checksum"],
            "CAPFLEET_IMAGE_FORMAT": self.image["format"],
            "CAPFLEET_ROOT_DISK_MIN_GIB": "5",
            "CAPFLEET_BAREMETAL_INTERFACE": WORKER_INTERFACE,
        }

    def cluster(
        self,
        site: NodeSite,
        tuning: TcgTuning = LONE,
        *,
        template: Path = HYBRID_TEMPLATE,
        record_vms: bool = False,
        **overrides: str,
    ) -> str:
        """A shipped flavor with bare-metal machines (the default one unless told) rendered for the site
        and these servers, patched for the lab."""
        variables = {**self.template_variables(), **overrides}
        manifest = site.manifest(tuning, template=template, **variables)
        return self.lab_patch(manifest, record_vms=record_vms)

    def lab_patch(self, manifest: str, *, record_vms: bool = False) -> str:
        """What only the lab sets: each cluster's own boot server URL (a data centre sets the operator's
        CAPFLEET_BOOT_URL once), the root disk by serial, and with `record_vms` the VMs recorded in NetBox's
        `vm_cluster`."""
        documents = [d for d in yaml.safe_load_all(manifest) if d]
        for document in documents:
            spec = document["spec"]
            if document["kind"] == "HybridCluster":
                spec["baremetal"]["bootServerURL"] = self.boot_url
                if record_vms:
                    spec["netbox"]["cluster"] = self.vm_cluster
            if document["kind"] == "HybridMachineTemplate" and "baremetal" in spec["template"]["spec"]:
                spec["template"]["spec"]["baremetal"]["rootDeviceHints"]["serialNumber"] = ROOT_SERIAL
        return yaml.safe_dump_all(documents, sort_keys=False)


def netbox_bmc_address(server: BareMetalServer, ipmi: Mapping[str, VirtualBmc]) -> str:
    """What NetBox records as a server's BMC: a virtualbmc's full ipmi:// URL, else the Redfish emulator's
    bare host:port (the template adds the scheme and the System's path)."""
    if server.name in ipmi:
        return ipmi[server.name].address
    return urlsplit(server.redfish_url).netloc


@contextlib.asynccontextmanager
async def open_metal(
    site: NodeSite,
    *,
    pxe_lab: PxeLab,
    servers: list[BareMetalServer],
    netbox: NetboxInstance,
    deploy_ramdisk: DeployRamdisk,
    node_image: NodeImage,
    start_operator: Callable[[str, dict[str, str]], object],
    workdir: Path,
    ipmi: Mapping[str, VirtualBmc] | None = None,
) -> AsyncIterator[Metal]:
    """Record `servers` in NetBox (BMC through `ipmi[name]` where given), create the Secrets, serve the
    node image and start the two bare-metal operators; the image server stops on exit."""
    # The virtualbmcs share the Redfish emulator's credentials, so one BMC Secret serves every server.
    bmcs = {server.name: netbox_bmc_address(server, ipmi or {}) for server in servers}
    role, vm_cluster = record_servers(netbox, servers, "worker", bmc_addresses=bmcs)
    for body in (netbox_secret(netbox), bmc_secret(servers[0], BMC_SECRET)):
        await site.kube.create(resources.SECRETS, body, site.namespace)
    (workdir / "boot").mkdir(parents=True, exist_ok=True)
    env, boot_url, _ = boot_on_host(pxe_lab, workdir / "boot")
    env |= {
        "CAPFLEET_DEPLOY_RAMDISK_DIR": str(deploy_ramdisk.directory),
        "CAPFLEET_IMAGE_CACHE_DIR": str(workdir / "images"),
        "CAPFLEET_IMAGE_SOURCE_CIDRS": "127.0.0.0/8",  # the lab's image server is on loopback
        # virtualbmc speaks only cipher suite 3; the Redfish servers do not care.
        "CAPFLEET_IPMI_CIPHER_SUITE": "3",
    }
    digest = sha256_of(node_image.raw)
    checksum_file = f"{digest}  disk.raw\n".encode()
    async with image_server({"/node.raw": node_image.raw, "/node.raw.sha256": checksum_file}) as url:
        operators = {
            "netbox_device": start_operator("netbox_device", OPERATOR_ENV["netbox_device"]),
            "baremetal_provision": start_operator("baremetal_provision", env),
        }
        image = {"url": f"{url}/node.raw", "checksum": digest, "format": "raw"}
        yield Metal(servers, role, vm_cluster, image, boot_url, operators)
