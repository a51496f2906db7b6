"""Power state from the spec, pause and clusterctl move: a paused LibvirtVM is left alone, powerState Off
stops the domain, and deleting for a move leaves the domain and its volumes for the new owner."""

from __future__ import annotations

import contextlib
import re

import libvirt
import pytest
from libvirt_vm_helpers import (
    HYPERVISORS,
    NO_CALLBACK,
    OPERATOR_ENV,
    VMS,
    condition,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    wait_condition,
)

from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
PAUSED = "cluster.x-k8s.io/paused"


def remove_domain(hv: Hypervisor, domain: str) -> None:
    """What the new management cluster's operator would do eventually; here, the test cleans up."""
    conn = hv.connect()
    try:
        with contextlib.suppress(libvirt.libvirtError):
            found = conn.lookupByName(domain)
            if found.isActive():
                found.destroy()
            found.undefine()
        pool = conn.storagePoolLookupByName(hv.pool_name)
        for volume in pool.listAllVolumes(0):
            if volume.name().startswith(f"{domain}_"):
                volume.delete(0)
    finally:
        conn.close()


async def test_pause_power_off_and_delete_for_move(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    domain = f"{namespace}_vm1"
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        await create_vm(kube, namespace, "vm0", NO_CALLBACK, annotations={PAUSED: ""})
        paused = await wait_condition(kube, VMS, "vm0", namespace, "Paused", "True", 30)
        assert "hypervisorName" not in paused["spec"]
        assert condition(paused, "Scheduled") is None

        await create_vm(kube, namespace, "vm1", NO_CALLBACK)
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 60)
        await kube.patch(VMS, "vm1", {"spec": {"powerState": "Off"}}, namespace)

        async def shut_off() -> bool:
            vm = await kube.get(VMS, "vm1", namespace) or {}
            running = condition(vm, "Running") or {}
            state = (vm.get("status") or {}).get("state")
            return state == "shutoff" and running.get("reason") == "PoweredOff"

        await eventually("vm1 to be powered off", shut_off, 30)
        assert (condition(await kube.get(VMS, "vm1", namespace), "Ready") or {}).get("status") == "True"

        move = {"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}}
        await kube.patch(VMS, "vm1", move, namespace)
        await kube.delete(VMS, "vm1", namespace)

        async def gone() -> bool:
            return await kube.get(VMS, "vm1", namespace) is None

        await eventually("vm1 to be deleted", gone, 30)
        domains, volumes = leftovers(hv, namespace)
        assert domains == [domain]  # vm0, paused, has none
        assert len(volumes) == 2
    finally:
        await kube.patch(VMS, "vm0", {"metadata": {"annotations": {PAUSED: None}}}, namespace)
        await delete_all(kube, namespace, [name])
        remove_domain(hv, domain)
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


def rechecks(operator: OperatorProcess, outcome: str) -> float:
    """How many of the operator's VM re-checks ended with `outcome`, from its metrics."""
    pattern = rf'capfleet_rechecks_total{{kind="LibvirtVM",outcome="{outcome}"}} ([0-9.e+]+)'
    found = re.search(pattern, operator.metrics())
    return float(found.group(1)) if found else 0.0


async def test_a_vm_as_listed_is_only_compared_and_a_domain_stopped_behind_its_back_is_started(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    """Its re-check (every 3 s here) compares the VM's status with its hypervisor's last listing of domains
    (every 2 s): nothing more while they agree; a domain destroyed outside the operator disagrees, and the
    re-check converges in full, starting the same domain again."""
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    operator = run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    domain = f"{namespace}_vm1"
    try:
        # A VM made before its hypervisor is Ready fails its first reconcile, and kopf's retry of it, due
        # later, would start the stopped domain below instead of the re-check this test is about.
        await wait_condition(kube, HYPERVISORS, name, None, "Ready", "True", 30)
        await create_vm(kube, namespace, "vm1", NO_CALLBACK)
        ready = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 60)
        uuid = ready["status"]["domainUUID"]

        async def compared() -> bool:
            return rechecks(operator, "as_listed") >= 2

        await eventually("re-checks to find vm1 as listed", compared, 30)

        converged = rechecks(operator, "converged")
        conn = hv.connect()
        try:
            conn.lookupByName(domain).destroy()

            async def running_again() -> bool:
                found = conn.lookupByName(domain)
                return bool(found.isActive()) and found.UUIDString() == uuid

            await eventually("the same domain running again", running_again, 60)
        finally:
            conn.close()
        assert rechecks(operator, "converged") > converged
        vm = await kube.get(VMS, "vm1", namespace) or {}
        assert (vm.get("status") or {}).get("state") == "running"
    finally:
        await delete_all(kube, namespace, [name])
        remove_domain(hv, domain)
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])
