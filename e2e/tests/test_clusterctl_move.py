"""`clusterctl move` of a provisioned hybrid cluster to a second management cluster, with the real clusterctl.

The source is the session's management cluster (CAPI's managers and the five operators); the target is a
second local control plane with its own CAPI managers and the five operators, configured as on the source
(same NetBox instance name, so netbox-device recognises the claims it moves in). What the user installs on
a management cluster besides what move carries is installed on the target by hand: the Hypervisor object
(same name: LibvirtVMs record their placement in `spec.hypervisorName`) with its SSH Secret, and
clusterctl's provider inventory on both sides. The NetBox and BMC Secrets move with the cluster because
they carry clusterctl's move label.

The proof is that nothing outside Kubernetes notices the move: the VM keeps its one libvirt domain (same
UUID), NetBox keeps exactly the same claim, the bare-metal server is not booted again, the addresses stay,
and the target's operators rebuild every status from spec, annotations and the external systems. Then the
Cluster is deleted on the target and nothing is left anywhere.

clusterctl marks each source object for deletion with a patch that replaces *all* its annotations by
`delete-for-move`, dropping the paused annotation and kopf's records just before the delete: every
operator must take that annotation as "hands off" (`capfleet.pausing.hands_off`), or the source's
baremetal-provision takes the object for a new, unpaused instance and network-boots the server again.
The suite checks the servers' power (libvirt domain ID and boot count) across the move for that.

IP pools move with their addresses because their CRDs carry clusterctl's move-hierarchy label.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e import clusterctl_move
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.site import (
    OPERATOR_ENV,
    OWNER_FIELD,
    HybridSite,
    boot_files,
    boot_on_host,
    domains_of,
)
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

CLUSTER = "hybrid"
CLUSTERS = resources.CAPI_CLUSTERS
MACHINES = resources.CAPI_MACHINES
CAPFLEET_KINDS = (kinds.HYBRID_MACHINE, kinds.LIBVIRT_VM, kinds.NETBOX_DEVICE, kinds.BAREMETAL_INSTANCE)
MOVED = (
    CLUSTERS,
    MACHINES,
    kinds.HYBRID_CLUSTER.resource,
    kinds.HYBRID_IPPOOL.resource,
    resources.IP_ADDRESS_CLAIMS,
    resources.IP_ADDRESSES,
    *(k.resource for k in CAPFLEET_KINDS),
)
BOOT_MARKER = "init started"
NETWORK_BOOTED = "baremetal.capfleet.dev/network-booted-at"
SERVER_BOOT_SECONDS = 300
QUIET_SECONDS = 15.0


@pytest.fixture
def site(hybrid_site: HybridSite, control_plane: ControlPlane) -> Iterator[HybridSite]:
    """The session cluster as the source, with clusterctl's provider inventory."""
    clusterctl_move.install_inventory(control_plane.kubectl)
    try:
        yield hybrid_site
    finally:
        clusterctl_move.remove_inventory(control_plane.kubectl)


@dataclass
class Target:
    """The second management cluster: control plane, CAPI managers, the five operators."""

    cp: ControlPlane
    kube: Kube
    operators: list[OperatorProcess] = field(default_factory=list)


@contextlib.asynccontextmanager
async def target_cluster(
    site: HybridSite, pxe_lab: PxeLab, netboot: TestImage, workdir: Path
) -> AsyncIterator[Target]:
    """A new management cluster prepared as a user would before `clusterctl move`; on exit the cluster is
    deleted there (if it got there) and everything is stopped, also on failure."""
    with ControlPlane() as cp, CapiManagers(cp):
        clusterctl_move.install_inventory(cp.kubectl)
        async with Kube.connect("capfleet-tests", str(cp.kubeconfig)) as kube:
            target = Target(cp, kube)
            try:
                await kube.create(
                    resources.NAMESPACES,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": site.namespace}},
                )
                await copy_hypervisor(site, kube)
                baremetal, _, _ = boot_on_host(pxe_lab, boot_files(netboot, workdir / "boot-target"))
                log_dir = artifacts_dir() / "operators-target"
                log_dir.mkdir(parents=True, exist_ok=True)
                for module, env in OPERATOR_ENV.items():
                    process = OperatorProcess(
                        module,
                        str(cp.kubeconfig),
                        log_dir,
                        namespaces=[site.namespace],
                        env=baremetal if module == "baremetal_provision" else env,
                    )
                    target.operators.append(process)
                    process.start()
                yield target
            finally:
                try:
                    if await kube.get(CLUSTERS, CLUSTER, site.namespace) is not None:
                        await kube.patch(CLUSTERS, CLUSTER, {"spec": {"paused": False}}, site.namespace)
                        await delete_cluster(kube, site.namespace)
                finally:
                    for process in target.operators:
                        process.stop()


async def copy_hypervisor(site: HybridSite, target: Kube) -> None:
    """The source's Hypervisor object and its SSH Secret, as the user installs them on the target."""
    hypervisor = await site.kube.get(kinds.HYPERVISOR.resource, site.hypervisor_name)
    assert hypervisor is not None
    ref = hypervisor["spec"]["sshKeySecretRef"]
    ssh = await site.kube.get(resources.SECRETS, ref["name"], ref["namespace"])
    assert ssh is not None
    await target.create(resources.SECRETS, bare(ssh), ref["namespace"])
    await target.create(kinds.HYPERVISOR.resource, bare(hypervisor))


def bare(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as a user would re-create it elsewhere: spec/data and name, labels, annotations only."""
    meta = obj["metadata"]
    kept = {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)}
    return {k: v for k, v in obj.items() if k not in {"metadata", "status"}} | {"metadata": kept}


async def delete_cluster(kube: Kube, namespace: str, within: float = 300) -> None:
    await kube.delete(CLUSTERS, CLUSTER, namespace)

    async def gone() -> bool:
        return await kube.get(CLUSTERS, CLUSTER, namespace) is None

    await eventually(f"Cluster {CLUSTER} to be deleted", gone, within)


def ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class Snapshot:
    """What must not change across the move, inside and outside Kubernetes."""

    machines: dict[str, tuple[str, str]]  # name -> (providerID, addresses)
    addresses: dict[str, str]  # IPAddress name -> address
    devices: dict[str, str]  # NetboxDevice name -> NetBox device name
    network_booted: dict[str, str]  # BaremetalInstance name -> its network-booted-at annotation
    domains: dict[str, str]  # libvirt domain name -> UUID
    owners: dict[str, str]  # NetBox device name -> owner field, for every claimed device of the lab


class ServerPowerCycled(AssertionError):
    """A lab server was powered off and on again, or booted again, while the cluster moved."""


def power(pxe_lab: PxeLab, servers: list[BareMetalServer]) -> dict[str, tuple[int, int]]:
    """Server name -> (libvirt domain ID, boots printed on its serial console). A running domain keeps
    its ID; any power-off and power-on through the BMC gives it a new one (-1 while off)."""
    conn = pxe_lab.daemon.connect()
    try:
        return {
            s.name: (conn.lookupByName(s.name).ID(), s.serial_output().count(BOOT_MARKER)) for s in servers
        }
    finally:
        conn.close()


async def running_machines(kube: Kube, namespace: str) -> list[dict[str, Any]] | None:
    """The two Machines once both have a Node (phase Running) and addresses, else None."""
    machines = await kube.list(MACHINES, namespace)
    if len(machines) != 2:
        return None
    for m in machines:
        status = m.get("status") or {}
        if status.get("phase") != "Running" or not status.get("addresses") or not status.get("nodeRef"):
            return None
    return machines


async def snapshot(site: HybridSite, kube: Kube) -> Snapshot | None:
    """The state to compare, read from `kube` (source or target); None until everything is converged."""
    ns = site.namespace
    machines = await running_machines(kube, ns)
    if machines is None:
        return None
    for kind in CAPFLEET_KINDS:
        objs = await kube.list(kind.resource, ns)
        expected = 2 if kind is kinds.HYBRID_MACHINE else 1
        if len(objs) != expected or not all(ready(o) for o in objs):
            return None
    addresses = await kube.list(resources.IP_ADDRESSES, ns)
    if len(addresses) != 2:
        return None
    devices = await kube.list(kinds.NETBOX_DEVICE.resource, ns)
    instances = await kube.list(kinds.BAREMETAL_INSTANCE.resource, ns)
    conn = site.hypervisor.connect()
    try:
        domains = {name: conn.lookupByName(name).UUIDString() for name in domains_of(site.hypervisor, ns)}
    finally:
        conn.close()
    ours = {s.name for s in site.servers}
    owners = {
        d["name"]: str(owner)
        for d in site.netbox.client.list_all("dcim/devices/")
        if d["name"] in ours and (owner := (d.get("custom_fields") or {}).get(OWNER_FIELD))
    }
    return Snapshot(
        machines={
            m["metadata"]["name"]: (
                m["spec"]["providerID"],
                repr(sorted((a["type"], a["address"]) for a in m["status"]["addresses"])),
            )
            for m in machines
        },
        addresses={a["metadata"]["name"]: a["spec"]["address"] for a in addresses},
        devices={d["metadata"]["name"]: (d.get("status") or {}).get("name", "") for d in devices},
        network_booted={
            i["metadata"]["name"]: (i["metadata"].get("annotations") or {}).get(NETWORK_BOOTED, "")
            for i in instances
        },
        domains=domains,
        owners=owners,
    )


async def left_in(kube: Kube, namespace: str) -> list[str]:
    """Every moved kind's objects still in `namespace`."""
    return [
        f"{resource.kind} {o['metadata']['name']}"
        for resource in MOVED
        for o in await kube.list(resource, namespace)
    ]


async def test_clusterctl_move_hands_a_provisioned_hybrid_cluster_over_without_touching_the_machines(
    site: HybridSite, pxe_lab: PxeLab, netboot_image: TestImage, tmp_path: Path
) -> None:
    """Provision on the source, move, compare, delete on the target."""
    ns = site.namespace
    site.apply(site.manifest())
    await site.bring_up(server_seconds=SERVER_BOOT_SECONDS)

    # clusterctl moves only clusters whose Machines all have a Node: register them as kubelets would.
    clusterctl_move.register_nodes(site.workload.kubectl, await site.kube.list(MACHINES, ns))
    before = await eventually("the cluster to settle on the source", lambda: snapshot(site, site.kube), 180)
    assert len(before.domains) == 1
    assert len(before.owners) == 1
    assert all(before.network_booted.values())
    powered = power(pxe_lab, site.servers)
    assert all(powered[name][0] > 0 and powered[name][1] >= 1 for name in before.owners), powered
    # The user-provided Secrets the HybridCluster names go with the cluster.
    for name in ("netbox", "bmc"):
        await site.kube.patch(
            resources.SECRETS, name, {"metadata": {"labels": {clusterctl_move.MOVE_LABEL: ""}}}, ns
        )

    async with target_cluster(site, pxe_lab, netboot_image, tmp_path) as target:
        try:
            output = clusterctl_move.move(site.cp.kubeconfig, target.cp.kubeconfig, ns)
        except BaseException:
            # Let the site's teardown delete what stayed on the source (a paused Cluster is never deleted).
            await site.kube.patch(CLUSTERS, CLUSTER, {"spec": {"paused": False}}, ns)
            raise
        moved_at = time.monotonic()
        assert "Deleting objects from the source cluster" in output, output

        # Nothing of the cluster is left on the source; the target converges to the same state.
        assert await eventually("the source namespace to be emptied", lambda: _empty(site.kube, ns), 60)
        after = await eventually(
            "the moved cluster to converge on the target", lambda: snapshot(site, target.kube), 300
        )
        assert after == before
        assert await target.kube.get(resources.SECRETS, f"{CLUSTER}-kubeconfig", ns) is not None
        cluster = await target.kube.get(CLUSTERS, CLUSTER, ns)
        assert cluster is not None
        assert not cluster["spec"].get("paused")

        # A negative check needs a window: a source handler that acted on an object as clusterctl
        # deleted it may still be talking to a BMC when clusterctl returns. Bounded, from the move's end.
        await asyncio.sleep(max(0.0, QUIET_SECONDS - (time.monotonic() - moved_at)))
        after_move = power(pxe_lab, site.servers)

        # Deleting on the target cleans up everything outside Kubernetes. The HybridIPPool is the user's
        # (not owned by the Cluster): it stays until deleted, and then goes.
        await delete_cluster(target.kube, ns)
        assert await left_in(target.kube, ns) == [f"HybridIPPool {CLUSTER}-nodes"]
        await target.kube.delete(kinds.HYBRID_IPPOOL.resource, f"{CLUSTER}-nodes", ns)
        assert await eventually("the HybridIPPool to go", lambda: _empty(target.kube, ns), 60)
        assert domains_of(site.hypervisor, ns) == []
        ours = {s.name for s in site.servers}
        devices = [d for d in site.netbox.client.list_all("dcim/devices/") if d["name"] in ours]
        assert [d["name"] for d in devices if (d.get("custom_fields") or {}).get(OWNER_FIELD)] == []
        assert {d["status"]["value"] for d in devices} == {"inventory"}

    # No server was power-cycled (or booted again) by the move.
    if after_move != powered:
        raise ServerPowerCycled(f"(domain ID, boots) before the move {powered}, after it {after_move}")


async def _empty(kube: Kube, namespace: str) -> bool:
    return await left_in(kube, namespace) == []
