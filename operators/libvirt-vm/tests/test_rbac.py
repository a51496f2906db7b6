"""libvirt-vm does its job with exactly the RBAC of its kustomize base, as its own ServiceAccount.

The operator runs with a TokenRequest token of capfleet-libvirt-vm-manager, bound only to the ClusterRole
that deploy/overlays/libvirt-vm renders. It must reach a real hypervisor (reading the SSH key and
known_hosts Secrets by name), place one VM, read its bootstrap-data Secret, run it, hold the SSH Secret
and delete it again with its namespace: if the base lacks a permission the VM never gets Ready (or the
apiserver's audit log shows a 403), and the test fails. One VM only: these are slow.
"""

from __future__ import annotations

import pytest
from libvirt_vm_helpers import (
    HYPERVISORS,
    OPERATOR_ENV,
    VMS,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    wait_condition,
)

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.callbacks import Callbacks
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.namespaces import delete_namespace_while_down
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests
from capfleet_e2e.site import ensure_base_image, remove_base_image

pytestmark = pytest.mark.integration


async def test_vm_runs_with_only_the_base_rbac(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    callbacks = Callbacks()  # the guest's user-data calls back here; only the VM's state is checked
    operator = run_operator_as("libvirt_vm", "libvirt-vm", secrets_in=[namespace], env=OPERATOR_ENV)
    hv_name = await create_hypervisor(kube, namespace, hv)
    try:
        await wait_condition(kube, HYPERVISORS, hv_name, None, "Reachable", "True", 60)
        await create_vm(kube, namespace, "vm1", callbacks.port)
        vm = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 120)
        domain = f"{namespace}_vm1"
        assert vm["spec"]["hypervisorName"] == hv_name
        assert vm["status"]["state"] == "running"
        assert vm["status"]["providerID"] == f"capfleet://vm/{hv_name}/{domain}"
        assert leftovers(hv, namespace)[0] == [domain]
        # The VM holds its hypervisor's SSH Secret: `kubectl delete namespace` (the Secret with it) still
        # removes the domain and its volumes, then lets the Secret and the namespace go.
        secret = await kube.get(resources.SECRETS, hv_name, namespace)
        assert secret is not None
        assert secret["metadata"]["finalizers"] == [f"{namespace}.libvirtvm.holds.capfleet.dev/vm1"]
        # Deleted while the operator is down, the Secret stays (Terminating) until the VM lets it go.
        [kept] = await delete_namespace_while_down(kube, namespace, operator, [hv_name], within=120)
        assert kept["metadata"]["finalizers"] == [f"{namespace}.libvirtvm.holds.capfleet.dev/vm1"]
        assert leftovers(hv, namespace) == ([], [])
    finally:
        await delete_all(kube, namespace, [hv_name])
        remove_base_image(hv)
        callbacks.close()
    assert leftovers(hv, namespace) == ([], [])
    # Events cannot be created in a terminating namespace, and once the namespace is gone (its deploy/tenant
    # RoleBinding with it) the Hypervisor, still there, may no longer read its SSH Secret: those refusals
    # are the only ones allowed. Before, the VM would not have become Ready.
    gone = f"/namespaces/{namespace}/secrets/{hv_name}"
    refused = forbidden_requests(control_plane, "libvirt-vm")
    assert [r for r in refused if "/events" not in r and not r.endswith(gone)] == []
