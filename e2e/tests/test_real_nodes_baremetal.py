"""The baremetal flavor as shipped: cluster-template-baremetal.yaml, whose control plane is a bare-metal
server claimed from NetBox, deployed with the node image by capfleet's deploy ramdisk and booted from its
disk, where real cloud-init runs `kubeadm init` and kube-vip takes the VIP on the server's eno1. The suite
waits for the Node to be Ready with a bare-metal provider ID and for KCP's own checks, then deletes the
cluster: the server is cleaned and its NetBox device given back as it was.

Marked `full` (`make test-full`): a QEMU server without KVM writing 2.3 GiB and running a control plane
takes tens of minutes on two cores. Each step's time is printed for the Performance page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from capfleet import netboxschema
from capfleet.api import kinds
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer, Shape
from capfleet_e2e.metalsite import BAREMETAL_TEMPLATE, ROOT_SERIAL, open_metal
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.nodesite import NodeSite
from capfleet_e2e.serviceaccounts import RunOperatorAs, starter
from capfleet_e2e.waiting import eventually
from capfleet_images.deployramdisk.build import DeployRamdisk
from capfleet_images.nodeimage.build import NodeImage

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(5400)]

# A control-plane node: kubeadm's minimum CPUs and memory for one (its preflight refuses fewer than two
# CPUs; the VM control planes get the same).
CONTROL_PLANE_SERVER = Shape(memory_mib=2048, disk_mib=6144, disk_serial=ROOT_SERIAL, vcpus=2)


async def test_the_baremetal_flavor_runs_its_control_plane_on_a_server_and_cleans_it(
    # Set up before node_site, so torn down after it: the deletion needs the server, its BMC and NetBox.
    pxe_lab: PxeLab,
    baremetal_servers: Callable[..., list[BareMetalServer]],
    netbox: NetboxInstance,
    deploy_ramdisk: DeployRamdisk,
    node_image: NodeImage,
    run_operator_as: RunOperatorAs,
    node_site: NodeSite,
    tmp_path: Path,
) -> None:
    site = node_site
    (server,) = baremetal_servers(1, CONTROL_PLANE_SERVER)
    async with open_metal(
        site,
        pxe_lab=pxe_lab,
        servers=[server],
        netbox=netbox,
        deploy_ramdisk=deploy_ramdisk,
        node_image=node_image,
        start_operator=starter(run_operator_as, site.namespace),
        workdir=tmp_path / "metal",
    ) as metal:
        started = time.monotonic()
        manifest = metal.cluster(
            site, template=BAREMETAL_TEMPLATE, CONTROL_PLANE_MACHINE_COUNT="1", WORKER_MACHINE_COUNT="0"
        )
        site.apply(manifest)
        [node] = await eventually("the control-plane Node to be Ready", lambda: site.ready_nodes(1), 3000, 10)
        print(f"\nbare-metal control-plane Node Ready {time.monotonic() - started:.0f} s after apply")
        await eventually("KCP's checks of the control plane", site.control_plane_healthy, 900, 10)
        print(f"KCP healthy {time.monotonic() - started:.0f} s after apply")
        [machine] = await eventually("the control-plane Machine Running", lambda: site.running(1), 600, 5)
        assert node["spec"]["providerID"].startswith("capfleet://metal/")
        assert machine["spec"]["providerID"] == node["spec"]["providerID"]
        [instance] = await site.kube.list(kinds.BAREMETAL_INSTANCE.resource, site.namespace)
        assert instance["spec"]["bmc"]["address"] == server.bmc_address  # built by bmcAddressTemplate

        deleting = time.monotonic()
        await site.delete_cluster(within=1800)
        print(f"cluster deleted (server cleaned) {time.monotonic() - deleting:.0f} s after the delete")
        (device,) = netbox.client.list_all("dcim/devices/", name=server.name)
        assert device["status"]["value"] == "inventory", device["status"]
        assert not device["custom_fields"].get(netboxschema.OWNER.name), device["custom_fields"]
