"""Real nodes on bare metal: a hybrid cluster whose control plane is a VM and whose workers are lab servers
claimed from NetBox, one driven through Redfish and one through IPMI, each deployed with the node image by
capfleet's deploy ramdisk, booted from its disk, joined by real cloud-init's `kubeadm join`; then a
rolling update that re-images a server; then a MachineDeployment whose image has a wrong checksum, whose
Machine shows RetryLimitExceeded and whose deletion cleans the server and frees its NetBox device; and
deletion that cleans the disks and releases the devices.

Marked `full` (`make test-full`): three QEMU guests without KVM, two of them writing 2.3 GiB and booting
it, take tens of minutes on two cores. Each step's time is printed for the README.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from baremetal_provision import markers  # type: ignore[import-untyped]
from capfleet import resources
from capfleet.api import kinds
from capfleet.resources import MACHINE_DEPLOYMENTS
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.metalsite import NODE_SERVER, Metal, open_metal
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.nodesite import NodeSite
from capfleet_e2e.serviceaccounts import RunOperatorAs, starter
from capfleet_e2e.waiting import eventually
from capfleet_images.deployramdisk.build import DeployRamdisk
from capfleet_images.nodeimage.build import NodeImage

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(7200)]

HYBRID_MACHINE_TEMPLATES = kinds.HYBRID_MACHINE_TEMPLATE.resource
HYBRID_MACHINES = kinds.HYBRID_MACHINE.resource
METAL_PROVIDER_ID = re.compile(r"^capfleet://metal/(\d+)$")


def metal_nodes(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Node name → provider ID, for the bare-metal Nodes."""
    found = {n["metadata"]["name"]: n["spec"].get("providerID", "") for n in nodes}
    return {name: pid for name, pid in found.items() if METAL_PROVIDER_ID.match(pid)}


async def test_bare_metal_workers_deployed_with_the_node_image_join_roll_and_are_cleaned(
    # Set up before node_site, so torn down after it: the cluster's deletion needs the servers, their
    # BMCs and NetBox to clean the disks and release the devices.
    pxe_lab: PxeLab,
    baremetal_servers: Callable[..., list[BareMetalServer]],
    ipmi_bmcs: Callable[..., VirtualBmc],
    netbox: NetboxInstance,
    deploy_ramdisk: DeployRamdisk,
    node_image: NodeImage,
    run_operator_as: RunOperatorAs,
    node_site: NodeSite,
    tmp_path: Path,
) -> None:
    site = node_site
    redfish, ipmi, spare, fourth = baremetal_servers(4, NODE_SERVER)
    vbmc = ipmi_bmcs(ipmi, same_credentials=True)
    async with open_metal(
        site,
        pxe_lab=pxe_lab,
        servers=[redfish, ipmi, spare, fourth],
        netbox=netbox,
        deploy_ramdisk=deploy_ramdisk,
        node_image=node_image,
        start_operator=starter(run_operator_as, site.namespace),
        workdir=tmp_path / "metal",
        ipmi={ipmi.name: vbmc},
    ) as metal:
        # netbox-device picks any free server: until both workers joined, only these two are free, so
        # one worker is driven through Redfish and one through IPMI in every run.
        set_device_status(netbox, [spare, fourth], "planned")
        started = time.monotonic()
        site.apply(metal.cluster(site, WORKER_MACHINE_COUNT="0"))
        # One server at a time: two deploying at once beside the control plane starve it on two cores.
        await site.add_workers(1)
        print(f"\ncontrol-plane VM Ready and KCP healthy {time.monotonic() - started:.0f} s after apply")
        await eventually("the first bare-metal Node to be Ready", lambda: site.ready_nodes(2), 1800, 10)
        print(f"first bare-metal worker Ready {time.monotonic() - started:.0f} s after apply")
        await site.add_workers(2)
        nodes = await eventually("three Nodes to be Ready", lambda: site.ready_nodes(3), 1800, 10)
        print(f"both bare-metal workers Ready {time.monotonic() - started:.0f} s after apply")
        await eventually("three Machines Running", lambda: site.running(3), 600, 5)
        joined = metal_nodes(nodes)
        assert len(joined) == 2, nodes
        await report_steps(site)
        instances = await site.kube.list(kinds.BAREMETAL_INSTANCE.resource, site.namespace)
        schemes = sorted(i["spec"]["bmc"]["address"].split("://")[0] for i in instances)
        assert schemes == ["ipmi", "redfish+https"], schemes
        set_device_status(netbox, [spare, fourth], "inventory")
        await rolling_update_reimages(site, metal, set(joined.values()))
        await a_bad_image_stops_and_frees_its_device(site, netbox)


def set_device_status(netbox: NetboxInstance, servers: list[BareMetalServer], status: str) -> None:
    for server in servers:
        (device,) = netbox.client.list_all("dcim/devices/", name=server.name)
        netbox.client.update("dcim/devices", device["id"], {"status": status})


async def report_steps(site: NodeSite) -> None:
    """Each server's steps from its BaremetalInstance's marks: network boot → image written → disk boot."""
    for instance in await site.kube.list(kinds.BAREMETAL_INSTANCE.resource, site.namespace):
        marks = instance["metadata"].get("annotations") or {}
        steps = [marks.get(key) for key in (markers.NETWORK_BOOTED, markers.CALLED_BACK, markers.DISK_BOOTED)]
        scheme = instance["spec"]["bmc"]["address"].split(":")[0]
        print(f"{scheme} server {instance['metadata']['name']}: network boot, written, disk boot at {steps}")


async def rolling_update_reimages(site: NodeSite, metal: Metal, before: set[str]) -> None:
    """A new template with a new image checksum rolls the MachineDeployment: one server is released and
    cleaned, the spare one deployed with the image and joined, and the old Node leaves."""
    kube, ns = site.kube, site.namespace
    deployments = await kube.list(MACHINE_DEPLOYMENTS, ns)
    (deployment,) = deployments
    old_name = deployment["spec"]["template"]["spec"]["infrastructureRef"]["name"]
    old = await kube.get(HYBRID_MACHINE_TEMPLATES, old_name, ns)
    assert old is not None
    new = {
        "apiVersion": old["apiVersion"],
        "kind": old["kind"],
        "metadata": {"name": f"{old_name}-v2", "namespace": ns},
        "spec": old["spec"],
    }
    # The image's checksum by URL instead of by digest: a new template for CAPI, the same bytes here.
    new["spec"]["template"]["spec"]["baremetal"]["image"]["checksum"] = metal.image["url"] + ".sha256"
    await kube.create(HYBRID_MACHINE_TEMPLATES, new, ns)
    started = time.monotonic()
    patch = {"spec": {"template": {"spec": {"infrastructureRef": {"name": f"{old_name}-v2"}}}}}
    await kube.patch(MACHINE_DEPLOYMENTS, deployment["metadata"]["name"], patch, ns)

    async def rolled() -> list[dict[str, Any]] | None:
        nodes = await site.ready_nodes(3)
        if nodes is None:
            return None
        now = set(metal_nodes(nodes).values())
        return nodes if len(now) == 2 and now != before else None

    await eventually("a worker re-imaged onto the spare server", rolled, 3600, 15)
    print(f"rolling update (one server re-imaged): {time.monotonic() - started:.0f} s")


async def a_bad_image_stops_and_frees_its_device(site: NodeSite, netbox: NetboxInstance) -> None:
    """A second MachineDeployment whose image has a wrong checksum: its server is deployed once, the
    HybridMachine shows RetryLimitExceeded with BadChecksum, and deleting the MachineDeployment cleans the
    server and gives its NetBox device back (status inventory)."""
    kube, ns = site.kube, site.namespace
    (deployment,) = await kube.list(MACHINE_DEPLOYMENTS, ns)
    template_name = deployment["spec"]["template"]["spec"]["infrastructureRef"]["name"]
    template = await kube.get(HYBRID_MACHINE_TEMPLATES, template_name, ns)
    assert template is not None
    baremetal = template["spec"]["template"]["spec"]["baremetal"]
    baremetal["image"]["checksum"] = "0" * 64
    baremetal["maxProvisioningAttempts"] = 1
    bad = f"{site.cluster_name}-bad"
    meta = {"name": bad, "namespace": ns}
    await kube.create(HYBRID_MACHINE_TEMPLATES, {**strip(template), "metadata": meta}, ns)
    spec = deployment["spec"]
    labels = {"cluster.x-k8s.io/cluster-name": site.cluster_name, "capfleet.dev/suite": bad}
    body = {
        "apiVersion": deployment["apiVersion"],
        "kind": "MachineDeployment",
        "metadata": meta,
        "spec": {
            "clusterName": site.cluster_name,
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **spec["template"]["spec"],
                    "infrastructureRef": {**spec["template"]["spec"]["infrastructureRef"], "name": bad},
                },
            },
        },
    }
    await kube.create(MACHINE_DEPLOYMENTS, body, ns)
    started = time.monotonic()

    async def stopped() -> dict[str, Any] | None:
        for owner in await kube.list(resources.CAPI_MACHINES, ns):
            if (owner["metadata"].get("labels") or {}).get("cluster.x-k8s.io/deployment-name") != bad:
                continue
            machine = await kube.get(HYBRID_MACHINES, owner["spec"]["infrastructureRef"]["name"], ns)
            conditions = ((machine or {}).get("status") or {}).get("conditions") or []
            found = [c for c in conditions if c["type"] == "ServerProvisioned"]
            if machine is not None and found and found[0].get("reason") == "RetryLimitExceeded":
                return machine
        return None

    machine = await eventually("the bad image's machine to stop at RetryLimitExceeded", stopped, 1800, 10)
    message = next(c for c in machine["status"]["conditions"] if c["type"] == "ServerProvisioned")["message"]
    assert "BadChecksum" in message, message
    print(f"bad checksum → RetryLimitExceeded on the HybridMachine {time.monotonic() - started:.0f} s")
    device = await kube.get(kinds.NETBOX_DEVICE.resource, machine["metadata"]["name"], ns)
    assert device is not None
    device_id = device["status"]["deviceID"]
    await kube.delete(MACHINE_DEPLOYMENTS, bad, ns)

    async def freed() -> bool:
        record = netbox.client.get(f"dcim/devices/{device_id}/")
        gone = await kube.get(HYBRID_MACHINES, machine["metadata"]["name"], ns) is None
        return gone and record["status"]["value"] == "inventory"

    await eventually("the server cleaned and its NetBox device free again", freed, 900, 5)
    took = time.monotonic() - started
    print(f"bad MachineDeployment deleted, server cleaned, device {device_id} free: {took:.0f} s")


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what the API server writes (for creating a copy)."""
    return {key: value for key, value in obj.items() if key not in {"metadata", "status"}}
