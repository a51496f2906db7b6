"""The glue drives a machine through CAPI's waits to its children and back, on the real control plane.

The test plays CAPI (it writes the Cluster's status) and the libvirt-vm, netbox-device and
baremetal-provision operators (it writes their objects' status); ipam-address allocates for real. The
glue runs exactly as users run it, with a resync far longer than the tests' waits, so every step below
is driven by watch events.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from glue_objects import (
    CLUSTERS,
    GLUE_ENV,
    HYBRID_CLUSTERS,
    HYBRID_MACHINES,
    POOL,
    child,
    condition,
    create_cluster,
    create_machine,
    create_pool,
    machine_condition,
    ready_condition,
    set_cluster_status,
)

from capfleet import pausing, resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.waiting import eventually
from capi_machine_glue import names, summaries

pytestmark = pytest.mark.integration

LIBVIRT_VMS = kinds.LIBVIRT_VM.resource
DEVICES = kinds.NETBOX_DEVICE.resource
INSTANCES = kinds.BAREMETAL_INSTANCE.resource
CLAIMS = resources.IP_ADDRESS_CLAIMS
VM_SPEC = {
    "vm": {"vcpus": 1, "memoryMiB": 256, "disks": [{"sizeGiB": 1, "image": "base"}]},
    "network": {"interfaces": [{"name": "eth0", "bridge": "br0", "ipPoolRefs": [POOL]}]},
}
METAL_SPEC = {
    "baremetal": {
        "deviceSelector": {"role": "worker"},
        "osProfile": {"kernelURL": "http://10.77.0.1/vmlinuz", "initrdURL": "http://10.77.0.1/initrd"},
    },
    "network": {"interfaces": [{"name": "eno1", "ipPoolRefs": [POOL]}]},
}
CLUSTER_SPEC = {
    "controlPlaneEndpoint": {"host": "10.77.0.5", "port": 6443},
    "failureDomains": [{"name": "fd-a", "controlPlane": True}],
    "netbox": {"connectionSecretRef": {"name": "netbox"}},
    "baremetal": {"bmcCredentialsSecretRef": {"name": "bmc"}, "bmcAddressTemplate": "ipmi://{address}:6230"},
}


async def test_vm_machine_waits_then_gets_address_and_vm_and_reports_the_vms_own_problem(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace)
    await create_cluster(kube, namespace, "c1", **CLUSTER_SPEC)
    await create_machine(kube, namespace, "cp-0", "c1", VM_SPEC, control_plane=True, data_secret="cp-0-data")
    run_operator("ipam_address", namespaces=[namespace])
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)

    async def cluster_provisioned() -> dict[str, object] | None:
        hc = await kube.get(HYBRID_CLUSTERS, "c1", namespace)
        status = (hc or {}).get("status") or {}
        return status if (status.get("initialization") or {}).get("provisioned") else None

    status = await eventually("HybridCluster provisioned", cluster_provisioned)
    assert status["failureDomains"] == [{"name": "fd-a", "controlPlane": True}]
    waiting = await machine_condition(
        kube, namespace, "cp-0", "ClusterInfrastructureReady", "WaitingForClusterInfrastructure"
    )
    assert waiting["status"] == "False"
    assert await kube.get(CLAIMS, "cp-0-eth0-0", namespace) is None

    await set_cluster_status(kube, namespace, "c1", infrastructureProvisioned=True)
    vm = await child(kube, LIBVIRT_VMS, namespace, "cp-0")
    claim = await kube.get(CLAIMS, "cp-0-eth0-0", namespace)
    assert claim is not None
    assert claim["spec"] == {"poolRef": POOL, "clusterName": "c1"}
    assert claim["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    address = (await kube.get(resources.IP_ADDRESSES, "cp-0-eth0-0", namespace) or {})["spec"]["address"]
    machine = await kube.get(HYBRID_MACHINES, "cp-0", namespace)
    assert machine is not None
    assert vm["metadata"]["ownerReferences"][0]["uid"] == machine["metadata"]["uid"]
    assert vm["spec"]["interfaces"] == [
        {
            "name": "eth0",
            "bridge": "br0",
            "userMode": False,
            "macAddress": names.mac_address(namespace, "cp-0", "eth0"),
            "addresses": [f"{address}/24"],
            "gateway": "10.77.0.1",
            "nameservers": [],
        }
    ]
    assert vm["spec"]["cloudInit"]["userDataSecretRef"] == {"name": "cp-0-data", "key": "value"}

    # libvirt-vm's part: the VM is placed but cannot run; the machine says so in the VM's own words.
    stuck = ready_condition("False", "NoCapacity", "Scheduled: no Hypervisor has 1 vCPU free")
    provider_id = names.vm_provider_id("hv-1", f"{namespace}-cp-0")
    vm_status = {"hypervisorName": "hv-1", "providerID": provider_id, "conditions": [stuck]}
    await kube.patch_status(LIBVIRT_VMS, "cp-0", vm_status, namespace)
    ready = await machine_condition(kube, namespace, "cp-0", "Ready", "NoCapacity")
    assert ready["message"] == "VMProvisioned: LibvirtVM cp-0: Scheduled: no Hypervisor has 1 vCPU free"
    machine = await kube.get(HYBRID_MACHINES, "cp-0", namespace)
    assert machine is not None
    assert machine["spec"]["providerID"] == provider_id
    assert not (machine["status"].get("initialization") or {}).get("provisioned")

    started = time.monotonic()
    await kube.patch_status(
        LIBVIRT_VMS, "cp-0", {"conditions": [ready_condition("True", "Ready")]}, namespace
    )
    await machine_condition(kube, namespace, "cp-0", "Ready", "Ready")
    woke_after = time.monotonic() - started
    machine = await kube.get(HYBRID_MACHINES, "cp-0", namespace)
    assert machine is not None
    assert machine["status"]["initialization"] == {"provisioned": True}
    assert machine["status"]["addresses"] == [
        {"type": "Hostname", "address": "cp-0"},
        {"type": "InternalIP", "address": address},
    ]
    assert machine["status"]["hypervisorName"] == "hv-1"
    assert woke_after < 10, f"the machine followed its VM only after {woke_after:.1f}s"


async def test_pause_is_mirrored_onto_children_and_lifted(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace)
    await create_cluster(kube, namespace, "c1", **CLUSTER_SPEC)
    await set_cluster_status(kube, namespace, "c1", infrastructureProvisioned=True)
    await create_machine(kube, namespace, "cp-0", "c1", VM_SPEC, control_plane=True, data_secret="cp-0-data")
    run_operator("ipam_address", namespaces=[namespace])
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)
    await child(kube, LIBVIRT_VMS, namespace, "cp-0")

    await kube.patch(CLUSTERS, "c1", {"spec": {"paused": True}}, namespace)

    async def children_paused(expected: bool) -> bool:
        objects = [
            await kube.get(LIBVIRT_VMS, "cp-0", namespace),
            await kube.get(CLAIMS, "cp-0-eth0-0", namespace),
        ]
        return all(o is not None and pausing.annotated(o["metadata"]) == expected for o in objects)

    await eventually("children paused", lambda: children_paused(True))
    paused = await machine_condition(kube, namespace, "cp-0", "Paused", "Paused")
    assert paused["status"] == "True"

    await kube.patch(CLUSTERS, "c1", {"spec": {"paused": False}}, namespace)
    await eventually("children unpaused", lambda: children_paused(False))
    await machine_condition(kube, namespace, "cp-0", "Paused", "NotPaused")


async def test_metal_worker_waits_for_control_plane_claims_a_device_then_provisions_and_deletes_in_order(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace)
    await create_cluster(kube, namespace, "c1", **CLUSTER_SPEC)
    await set_cluster_status(kube, namespace, "c1", infrastructureProvisioned=True)
    await create_machine(
        kube, namespace, "w-0", "c1", METAL_SPEC, control_plane=False, data_secret="w-0-data"
    )
    run_operator("ipam_address", namespaces=[namespace])
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)

    await machine_condition(
        kube, namespace, "w-0", "ControlPlaneInitialized", "WaitingForControlPlaneInitialized"
    )
    assert await kube.get(DEVICES, "w-0", namespace) is None

    await set_cluster_status(
        kube, namespace, "c1", infrastructureProvisioned=True, controlPlaneInitialized=True
    )
    device = await child(kube, DEVICES, namespace, "w-0")
    assert device["spec"]["selector"] == {
        "role": "worker",
        "status": "inventory",
        "tags": [],
        "customFields": {},
    }
    assert device["spec"]["connectionSecretRef"] == {"name": "netbox"}
    # No operator serves the device here: the machine says so once the grace for a first report is over
    # (its retry comes just after the grace).
    within = summaries.REPORT_GRACE_SECONDS + 15
    await machine_condition(kube, namespace, "w-0", "DeviceClaimed", "Pending", within=within)

    # netbox-device's part: a server is claimed.
    claimed = {
        "deviceID": 7,
        "name": "srv-7",
        "bmcAddress": "127.0.0.1",
        "interfaces": [{"name": "eno1", "macAddress": "52:54:00:aa:bb:07"}],
        "conditions": [ready_condition("True", "Ready")],
    }
    await kube.patch_status(DEVICES, "w-0", claimed, namespace)
    instance = await child(kube, INSTANCES, namespace, "w-0")
    address = (await kube.get(resources.IP_ADDRESSES, "w-0-eno1-0", namespace) or {})["spec"]["address"]
    assert instance["spec"]["bmc"] == {
        "address": "ipmi://127.0.0.1:6230",
        "credentialsSecretRef": {"name": "bmc"},
        "disableCertificateVerification": False,
        "allowRedfishHTTP": False,
        "addressCIDRs": [],
    }
    assert instance["spec"]["bootMACAddress"] == "52:54:00:aa:bb:07"
    assert instance["spec"]["providerID"] == "capfleet://metal/7"
    assert instance["spec"]["interfaces"][0]["name"] == "eno1"
    assert instance["spec"]["interfaces"][0]["macAddress"] == "52:54:00:aa:bb:07"
    assert instance["spec"]["interfaces"][0]["addresses"] == [f"{address}/24"]
    assert instance["spec"]["metaData"] == {
        "control-plane-endpoint-host": "10.77.0.5",
        "control-plane-endpoint-port": "6443",
    }
    machine = await eventually(
        "providerID before provisioned",
        lambda: _with_provider_id(kube, namespace, "w-0"),
    )
    assert not (machine["status"].get("initialization") or {}).get("provisioned")

    # baremetal-provision's part: the server is provisioned. Its finalizer stays until it is powered off.
    await kube.patch(
        INSTANCES, "w-0", {"metadata": {"finalizers": ["test.capfleet.dev/powered-off"]}}, namespace
    )
    await kube.patch_status(
        INSTANCES,
        "w-0",
        {"phase": "Provisioned", "conditions": [ready_condition("True", "Ready")]},
        namespace,
    )
    await machine_condition(kube, namespace, "w-0", "Ready", "Ready")
    hm = await kube.get(HYBRID_MACHINES, "w-0", namespace)
    assert hm is not None
    assert hm["status"]["deviceID"] == 7
    assert hm["status"]["initialization"] == {"provisioned": True}

    await kube.delete(HYBRID_MACHINES, "w-0", namespace)
    deleting = await machine_condition(kube, namespace, "w-0", "Ready", "Deleting")
    assert deleting["message"] == "waiting for BaremetalInstance w-0 to be deleted"
    device_now = await kube.get(DEVICES, "w-0", namespace)
    assert device_now is not None
    assert not device_now["metadata"].get("deletionTimestamp"), "the device was released before the server"

    await kube.patch(INSTANCES, "w-0", {"metadata": {"finalizers": None}}, namespace)

    async def all_gone() -> bool:
        for resource, name in ((HYBRID_MACHINES, "w-0"), (DEVICES, "w-0"), (CLAIMS, "w-0-eno1-0")):
            if await kube.get(resource, name, namespace) is not None:
                return False
        return True

    await eventually("the machine and its children to be gone", all_gone)


async def _with_provider_id(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    found = await kube.get(HYBRID_MACHINES, name, namespace)
    return found if found and (found.get("spec") or {}).get("providerID") else None


async def test_machine_without_a_machine_owner_says_so(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    body = {
        "apiVersion": HYBRID_MACHINES.api_version,
        "kind": "HybridMachine",
        "metadata": {"name": "orphan"},
        "spec": VM_SPEC,
    }
    await kube.create(HYBRID_MACHINES, body, namespace)
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)
    found = await machine_condition(kube, namespace, "orphan", "Ready", "WaitingForMachine")
    assert found["message"] == "ClusterInfrastructureReady: no CAPI Machine owns this HybridMachine yet"
    assert condition(await kube.get(HYBRID_MACHINES, "orphan", namespace), "Paused") is not None


async def test_control_plane_vip_comes_from_a_pool_and_is_released_with_the_cluster(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace)
    spec = {"controlPlaneEndpointPoolRef": POOL}
    await create_cluster(kube, namespace, "c1", **spec)
    run_operator("ipam_address", namespaces=[namespace])
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)

    async def endpoint() -> dict[str, Any] | None:
        found = await kube.get(HYBRID_CLUSTERS, "c1", namespace)
        provisioned = ((found or {}).get("status") or {}).get("initialization", {}).get("provisioned")
        return found if provisioned else None

    cluster = await eventually("the VIP allocated and the HybridCluster provisioned", endpoint)
    claim = await kube.get(CLAIMS, names.endpoint_claim("c1"), namespace)
    assert claim is not None
    address = await kube.get(resources.IP_ADDRESSES, claim["status"]["addressRef"]["name"], namespace)
    assert address is not None
    assert cluster["spec"]["controlPlaneEndpoint"] == {"host": address["spec"]["address"], "port": 6443}
    assert condition(cluster, "ControlPlaneEndpointReady")["reason"] == "Allocated"  # type: ignore[index]

    await kube.delete(HYBRID_CLUSTERS, "c1", namespace)

    async def released() -> bool:
        return await kube.get(CLAIMS, names.endpoint_claim("c1"), namespace) is None and (
            await kube.get(HYBRID_CLUSTERS, "c1", namespace) is None
        )

    await eventually("the VIP released and the HybridCluster gone", released)


async def test_externally_managed_cluster_is_left_alone(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_cluster(kube, namespace, "ext", **CLUSTER_SPEC)
    await kube.patch(
        HYBRID_CLUSTERS,
        "ext",
        {"metadata": {"annotations": {"cluster.x-k8s.io/managed-by": "someone"}}},
        namespace,
    )
    await create_cluster(kube, namespace, "own", **CLUSTER_SPEC)
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)
    await eventually(
        "the glue to reconcile its own cluster", lambda: _provisioned_cluster(kube, namespace, "own")
    )
    external = await kube.get(HYBRID_CLUSTERS, "ext", namespace)
    assert external is not None
    assert "status" not in external or not external["status"], "the glue wrote to a managed-by cluster"
    assert "capi-machine-glue.capfleet.dev/finalizer" not in (external["metadata"].get("finalizers") or [])


async def _provisioned_cluster(kube: Kube, namespace: str, name: str) -> bool:
    found = await kube.get(HYBRID_CLUSTERS, name, namespace)
    return bool(((found or {}).get("status") or {}).get("initialization", {}).get("provisioned"))


async def test_lost_status_is_rebuilt_from_children_and_failure_domain_reaches_the_vm(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace)
    await create_cluster(kube, namespace, "c1", **CLUSTER_SPEC)
    await set_cluster_status(kube, namespace, "c1", infrastructureProvisioned=True)
    await create_machine(
        kube, namespace, "cp-0", "c1", VM_SPEC, control_plane=True, data_secret="d", failure_domain="fd-a"
    )
    run_operator("ipam_address", namespaces=[namespace])
    run_operator("capi_machine_glue", namespaces=[namespace], env=GLUE_ENV)
    vm = await child(kube, LIBVIRT_VMS, namespace, "cp-0")
    assert vm["spec"]["failureDomain"] == "fd-a"
    vm_status = {"providerID": "capfleet://vm/hv/d", "conditions": [ready_condition("True", "Ready")]}
    await kube.patch_status(LIBVIRT_VMS, "cp-0", vm_status, namespace)
    await machine_condition(kube, namespace, "cp-0", "Ready", "Ready")
    before = (await kube.get(HYBRID_MACHINES, "cp-0", namespace) or {})["status"]

    await kube.patch_status(
        HYBRID_MACHINES,
        "cp-0",
        {"conditions": None, "initialization": None, "addresses": None, "failureDomain": None},
        namespace,
    )
    await machine_condition(kube, namespace, "cp-0", "Ready", "Ready")
    after = (await kube.get(HYBRID_MACHINES, "cp-0", namespace) or {})["status"]
    for key in ("initialization", "addresses", "failureDomain"):
        assert after[key] == before[key], key
    assert after["failureDomain"] == "fd-a"
    assert len(await kube.list(CLAIMS, namespace)) == 1, "rebuilding the status claimed a second address"
