"""Bare-metal workers for a cluster of real nodes: lab servers in NetBox, deployed with the node image.

`open_metal` adds to a `NodeSite` what a hybrid cluster's bare-metal half needs, all real: the lab's QEMU
servers as free NetBox devices of a worker role (with their BMC addresses: Redfish through the emulator,
or IPMI through a virtualbmc when the test gives one, with the same credentials), the NetBox and BMC
Secrets, netbox-device, and baremetal-provision serving capfleet's deploy ramdisk with its image cache,
which fetches the node image's `disk.raw` from an HTTP server on loopback (the servers have no route to
it). `Metal.hybrid(manifest)` turns the VM template into a hybrid one: the HybridCluster names NetBox and
the BMC Secret, and the workers' HybridMachineTemplate claims servers and has the node image written to
the disk with the serial number `ROOT_SERIAL` (a root device hint).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capfleet import resources
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer, Shape
from capfleet_e2e.deployramdisk.build import DeployRamdisk
from capfleet_e2e.imageserver import image_server, sha256_of
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.nodeimage.build import NodeImage
from capfleet_e2e.nodesite import NodeSite
from capfleet_e2e.site import OPERATOR_ENV, bmc_secret, boot_on_host, netbox_secret, record_servers

ROOT_SERIAL = "CAPFLEET-ROOT"
# A worker node: the node image (2.3 GiB) and its seed on a 6 GiB disk; kubelet and containerd in 1.5 GiB.
NODE_SERVER = Shape(memory_mib=1536, disk_mib=6144, disk_serial=ROOT_SERIAL)
WORKER_INTERFACE = "eno1"
BMC_SECRET = "bmc"
# The lab's BMCs (sushy-tools and virtualbmc) listen on loopback: the only network credentials may go to.
LAB_BMC_NETWORK = "127.0.0.0/8"
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

    def hybrid(self, manifest: str, template: str = "md-0", *, record_vms: bool = False) -> str:
        """The VM template `manifest` with bare-metal workers (the HybridMachineTemplate `*-<template>`),
        and with `record_vms` its VMs recorded in NetBox's `vm_cluster`."""
        documents = [d for d in yaml.safe_load_all(manifest) if d]
        for document in documents:
            spec = document["spec"]
            if document["kind"] == "HybridCluster":
                spec["netbox"] = {"connectionSecretRef": {"name": "netbox"}}
                if record_vms:
                    spec["netbox"]["cluster"] = self.vm_cluster
                spec["baremetal"] = {
                    "bmcCredentialsSecretRef": {"name": BMC_SECRET},
                    "bmcAddressCIDRs": [LAB_BMC_NETWORK],
                    "bootServerURL": self.boot_url,
                }
            if document["kind"] == "HybridMachineTemplate" and document["metadata"]["name"].endswith(
                template
            ):
                machine = spec["template"]["spec"]
                del machine["vm"]
                machine["baremetal"] = {
                    "deviceSelector": {"role": self.role},
                    "image": self.image,
                    "rootDeviceHints": {"serialNumber": ROOT_SERIAL},
                }
                for interface in machine["network"]["interfaces"]:
                    interface.pop("bridge", None)
                    interface["name"] = WORKER_INTERFACE
        return yaml.safe_dump_all(documents, sort_keys=False)


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
    bmcs = {name: vbmc.address for name, vbmc in (ipmi or {}).items()}
    role, vm_cluster = record_servers(netbox, servers, "worker", bmc_addresses=bmcs)
    for body in (netbox_secret(netbox), bmc_secret(servers[0], BMC_SECRET)):
        await site.kube.create(resources.SECRETS, body, site.namespace)
    (workdir / "boot").mkdir(parents=True, exist_ok=True)
    env, boot_url, _ = boot_on_host(pxe_lab, workdir / "boot")
    env |= {
        "CAPFLEET_DEPLOY_RAMDISK_DIR": str(deploy_ramdisk.directory),
        "CAPFLEET_IMAGE_CACHE_DIR": str(workdir / "images"),
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
