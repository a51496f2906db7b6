"""capi-machine-glue does its job with exactly the RBAC of its kustomize base, as its own ServiceAccount.

One VM machine and one bare-metal machine go from creation through pause to deletion while the glue runs
with a TokenRequest token bound only to the ClusterRole its overlay renders; any request the apiserver
refuses shows in the audit log and fails the test.
"""

from __future__ import annotations

import pytest
from glue_objects import (
    CLUSTERS,
    GLUE_ENV,
    HYBRID_MACHINES,
    child,
    create_cluster,
    create_machine,
    create_pool,
    machine_condition,
    ready_condition,
    set_cluster_status,
)
from test_glue_flow import CLUSTER_SPEC, METAL_SPEC, VM_SPEC

from capfleet import pausing
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration


async def test_vm_and_metal_machines_with_only_the_base_rbac(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator: RunOperator,
    run_operator_as: RunOperatorAs,
) -> None:
    await create_pool(kube, namespace)
    await create_cluster(kube, namespace, "c1", **CLUSTER_SPEC)
    await set_cluster_status(
        kube, namespace, "c1", infrastructureProvisioned=True, controlPlaneInitialized=True
    )
    await create_machine(kube, namespace, "cp-0", "c1", VM_SPEC, control_plane=True, data_secret="cp-0-data")
    await create_machine(
        kube, namespace, "w-0", "c1", METAL_SPEC, control_plane=False, data_secret="w-0-data"
    )
    run_operator("ipam_address", namespaces=[namespace])
    run_operator_as("capi_machine_glue", "capi-machine-glue", namespaces=[namespace], env=GLUE_ENV)

    vm = await child(kube, kinds.LIBVIRT_VM.resource, namespace, "cp-0")
    await kube.patch_status(
        kinds.LIBVIRT_VM.resource,
        "cp-0",
        {"providerID": "capfleet://vm/hv/x", "conditions": [ready_condition("True", "Ready")]},
        namespace,
    )
    await child(kube, kinds.NETBOX_DEVICE.resource, namespace, "w-0")
    device_status = {
        "deviceID": 3,
        "name": "srv-3",
        "bmcAddress": "127.0.0.1",
        "interfaces": [{"name": "eno1", "macAddress": "52:54:00:aa:bb:03"}],
        "conditions": [ready_condition("True", "Ready")],
    }
    await kube.patch_status(kinds.NETBOX_DEVICE.resource, "w-0", device_status, namespace)
    await child(kube, kinds.BAREMETAL_INSTANCE.resource, namespace, "w-0")
    await machine_condition(kube, namespace, "cp-0", "Ready", "Ready")

    await kube.patch(CLUSTERS, "c1", {"spec": {"paused": True}}, namespace)

    async def vm_paused() -> bool:
        found = await kube.get(kinds.LIBVIRT_VM.resource, "cp-0", namespace)
        return found is not None and pausing.annotated(found["metadata"])

    await eventually("the pause mirrored onto the VM", vm_paused)
    await kube.patch(CLUSTERS, "c1", {"spec": {"paused": False}}, namespace)
    await machine_condition(kube, namespace, "cp-0", "Paused", "NotPaused")

    for name in ("cp-0", "w-0"):
        await kube.delete(HYBRID_MACHINES, name, namespace)

    async def machines_gone() -> bool:
        return all([await kube.get(HYBRID_MACHINES, n, namespace) is None for n in ("cp-0", "w-0")])

    await eventually("both machines and their children to be deleted", machines_gone)
    assert vm["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    assert forbidden_requests(control_plane, "capi-machine-glue") == []
