"""Faults and placement on real hypervisors: a wrong known_hosts is refused with a clear condition; sshd
stopped mid-way gives a condition, then the VM converges once it is back, as it does after libvirtd
restarts mid-create; a missing base image is reported and leaves no volume; three anti-affine VMs spread
over two hypervisors within each one's capacity, a fourth waits for room; a root disk left too small by a
kill is grown; a Hypervisor's deletion waits for its VMs; a VM whose host is gone says why its deletion
fails, and `detached` lets it go, as does a VM that never wrote to its host; a deletion while libvirtd hangs
says so within the call time-out and finishes once it answers; a deletion run again after it let go of its
Secrets finishes without them; another management cluster's domain of the same name is neither taken nor
deleted. What a tenant's VM may use on its host is in test_tenant_confinement.py."""

from __future__ import annotations

import asyncio

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
    precreate_volume,
    wait_condition,
)

from capfleet import instances, resources, secretholds
from capfleet.kube import Kube
from capfleet.resources import Resource
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.libvirt.sshd import generate_ed25519
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually
from libvirt_vm import domains, names, seeding

pytestmark = pytest.mark.integration


async def test_wrong_known_hosts_is_refused_with_a_clear_condition(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    hv = hypervisors[0]
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    _, other_key = generate_ed25519()
    wrong = f"[{hv.sshd.host}]:{hv.sshd.port} {other_key}\n"
    name = await create_hypervisor(kube, namespace, hv, known_hosts=wrong)
    try:
        found = await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "False", 30)
        reachable = condition(found, "Reachable")
        assert reachable is not None
        assert reachable["reason"] == "HostKeyMismatch"
        assert "host key does not match" in reachable["message"]
        assert "PRIVATE KEY" not in str(found)
        assert condition(found, "Ready") is not None
    finally:
        await delete_all(kube, namespace, [name])


async def test_missing_base_image_is_reported_and_leaves_no_volume(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    hv = hypervisors[0]
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        disks = [{"name": "root", "sizeGiB": 1, "sourceImage": "no-such-image.qcow2"}]
        await create_vm(kube, namespace, "vm1", NO_CALLBACK, disks=disks)
        vm = await wait_condition(kube, VMS, "vm1", namespace, "DisksReady", "False", 30)
        disks_ready = condition(vm, "DisksReady") or {}
        assert disks_ready.get("reason") == "BaseImageMissing"
        assert "no-such-image.qcow2" in disks_ready.get("message", "")
        assert (condition(vm, "Ready") or {}).get("reason") == "BaseImageMissing"
        assert leftovers(hv, namespace) == ([], [])
    finally:
        await delete_all(kube, namespace, [name])
    assert leftovers(hv, namespace) == ([], [])


async def test_vm_converges_after_sshd_comes_back(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    hv = hypervisors[1]
    ensure_base_image(hv, test_image)
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        hv.sshd.stop()
        try:
            found = await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "False", 30)
            assert (condition(found, "Reachable") or {}).get("reason") == "Unreachable"
            await create_vm(kube, namespace, "vm1", NO_CALLBACK, hypervisorName=name)
            vm = await wait_condition(kube, VMS, "vm1", namespace, "DisksReady", "False", 30)
            assert (condition(vm, "DisksReady") or {}).get("reason") == "Unreachable"
            assert leftovers(hv, namespace) == ([], [])
        finally:
            hv.sshd.start()
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        vm = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 90)
        assert vm["status"]["state"] == "running"
        assert leftovers(hv, namespace)[0] == [f"{namespace}_vm1"]
    finally:
        await delete_all(kube, namespace, [name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


async def test_anti_affine_vms_spread_within_capacity(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    for hv in hypervisors:
        ensure_base_image(hv, test_image)
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    first, second = hypervisors
    names = [await create_hypervisor(kube, namespace, first)]
    status = (await wait_condition(kube, HYPERVISORS, names[0], None, "Reachable", "True", 30))["status"]
    # The second keeps back all but one vCPU: it has room for one VM, the first for two.
    reserved = {"vcpus": status["capacity"]["vcpus"] - 1}
    names.append(await create_hypervisor(kube, namespace, second, reserved=reserved))
    try:
        await wait_condition(kube, HYPERVISORS, names[1], None, "Reachable", "True", 30)
        # The first hypervisor gets room for exactly two one-vCPU VMs too.
        await kube.patch(
            HYPERVISORS, names[0], {"spec": {"reserved": {"vcpus": status["capacity"]["vcpus"] - 2}}}
        )
        for vm in ("vm1", "vm2", "vm3"):
            await create_vm(kube, namespace, vm, NO_CALLBACK, antiAffinityKey="cp")
            if vm != "vm3":  # placed one after the other, so the second must avoid the first
                await wait_condition(kube, VMS, vm, namespace, "Scheduled", "True", 30)
        placed = {}
        for vm in ("vm1", "vm2", "vm3"):
            found = await wait_condition(kube, VMS, vm, namespace, "Ready", "True", 120)
            placed[vm] = found["spec"]["hypervisorName"]
        assert sorted(placed.values()) == sorted([names[0], names[0], names[1]])
        assert placed["vm1"] != placed["vm2"]
        await create_vm(kube, namespace, "vm4", NO_CALLBACK, antiAffinityKey="cp")
        vm4 = await wait_condition(kube, VMS, "vm4", namespace, "Scheduled", "False", 30)
        assert (condition(vm4, "Scheduled") or {}).get("reason") == "InsufficientCapacity"
        assert "hypervisorName" not in vm4["spec"]

        async def allocated() -> bool:
            hv = await kube.get(HYPERVISORS, names[0])
            used = ((hv or {}).get("status") or {}).get("allocated") or {}
            return bool(used.get("vcpus") == 2)

        await eventually("the first hypervisor to report two allocated vCPUs", allocated, 30)
        assert len(leftovers(first, namespace)[0]) == 2
        assert len(leftovers(second, namespace)[0]) == 1
    finally:
        await delete_all(kube, namespace, names)
        for hv in hypervisors:
            remove_base_image(hv)
    assert leftovers(first, namespace) == ([], [])
    assert leftovers(second, namespace) == ([], [])


async def test_libvirtd_restarted_mid_create_converges_without_duplicates(
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
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        await create_vm(kube, namespace, "vm1", NO_CALLBACK)
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 60)
        await create_vm(kube, namespace, "vm2", NO_CALLBACK)
        await asyncio.to_thread(hv.daemon.restart)
        for vm in ("vm1", "vm2"):
            found = await wait_condition(kube, VMS, vm, namespace, "Ready", "True", 90)
            assert found["status"]["state"] == "running"
        domains, volumes = leftovers(hv, namespace)
        assert sorted(domains) == [f"{namespace}_vm1", f"{namespace}_vm2"]
        assert len(volumes) == 4
    finally:
        await delete_all(kube, namespace, [name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


async def test_deletion_without_its_hypervisor_says_why_and_detached_lets_it_go(
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
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        # Pinned to a Hypervisor that does not exist: it never wrote anywhere, so there is nothing to undo.
        await create_vm(kube, namespace, "nowhere", NO_CALLBACK, hypervisorName="no-such-hypervisor")
        await wait_condition(kube, VMS, "nowhere", namespace, "DisksReady", "False", 30)
        await kube.delete(VMS, "nowhere", namespace)
        await eventually("the untouched VM to be deleted", lambda: gone(kube, "nowhere", namespace), 30)

        # As kills leave them: a root disk cloned but not grown, a seed volume created but never written.
        precreate_volume(hv, f"{namespace}_vm1_root.qcow2", 512 << 20, "qcow2")
        precreate_volume(hv, f"{namespace}_vm1_cidata.iso", 64 << 10, "raw")
        await create_vm(kube, namespace, "vm1", NO_CALLBACK, powerState="Off")
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 90)
        root, seed = (volume_of(hv, f"{namespace}_vm1_{v}") for v in ("root.qcow2", "cidata.iso"))
        assert root[0] == 1 << 30, "grown to the spec's 1 GiB"
        assert set(seeding.files_of(seed[1]) or {}) == {"user-data", "meta-data", "network-config"}
        # A Hypervisor is not deleted under its VMs: it waits, and says for whom.
        await kube.delete(HYPERVISORS, name)
        in_use = await wait_condition(kube, HYPERVISORS, name, None, "Ready", "False", 30)
        assert (condition(in_use, "Ready") or {}).get("reason") == "InUse"
        assert f"{namespace}/vm1" in (condition(in_use, "Ready") or {}).get("message", "")
        hv.sshd.stop()  # the host is gone, as far as capfleet can tell
        try:
            await kube.delete(VMS, "vm1", namespace)
            failed = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "False", 60)
            ready = condition(failed, "Ready") or {}
            assert ready.get("reason") == "DeletionFailed"
            assert "libvirt.capfleet.dev/detached=true" in ready.get("message", "")
            detach = {"metadata": {"annotations": {"libvirt.capfleet.dev/detached": "true"}}}
            await kube.patch(VMS, "vm1", detach, namespace)
            await eventually("the detached VM to be deleted", lambda: gone(kube, "vm1", namespace), 30)
            hypervisor_gone = lambda: gone(kube, name, None, HYPERVISORS)  # noqa: E731
            await eventually("the Hypervisor to be deleted once unused", hypervisor_gone, 150, 1)
        finally:
            hv.sshd.start()
        assert leftovers(hv, namespace)[0] == [f"{namespace}_vm1"], "detached: the host was left alone"
        remove_domains(hv, namespace)
    finally:
        await delete_all(kube, namespace, [name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


async def test_a_deletion_while_libvirtd_hangs_says_so_and_finishes_once_it_answers(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    """A libvirt client waits for ever for an answer: without a bound, a host that hangs mid-call would hold
    the VM's deletion (and its namespace's) for good."""
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    run_operator("libvirt_vm", env={**OPERATOR_ENV, "CAPFLEET_CALL_TIMEOUT_SECONDS": "5"})
    name = await create_hypervisor(kube, namespace, hv)
    try:
        await create_vm(kube, namespace, "vm1", NO_CALLBACK, powerState="Off")
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 90)
        with hv.daemon.frozen():
            await kube.delete(VMS, "vm1", namespace)
            failed = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "False", 60)
            ready = condition(failed, "Ready") or {}
            assert ready.get("reason") == "DeletionFailed"
            assert "no answer" in ready.get("message", "")
            assert await kube.get(VMS, "vm1", namespace) is not None
        deleted = lambda: gone(kube, "vm1", namespace)  # noqa: E731
        await eventually("the VM to be deleted once libvirtd answers", deleted, 90)
    finally:
        await delete_all(kube, namespace, [name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


async def test_a_deletion_run_again_after_it_let_go_of_its_secrets_finishes_without_them(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    """kopf may run a deletion handler again after it succeeded (when it could not yet remove its own
    finalizer: a timer of the object was still exiting), by when the hypervisor's Secret, let go of, is
    gone. The state such a first run leaves is built here, the operator stopped: the domain removed, the
    VM marked as let go, its hold taken off the Secret and the Secret deleted. Then the VM is deleted."""
    hv = hypervisors[1]
    ensure_base_image(hv, test_image)
    operator = run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    try:
        await create_vm(kube, namespace, "vm1", NO_CALLBACK, powerState="Off")
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 90)
        operator.stop()
        remove_domains(hv, namespace)
        let_go = {"metadata": {"annotations": {secretholds.LET_GO_ANNOTATION: "true"}}}
        await kube.patch(VMS, "vm1", let_go, namespace)
        await kube.patch(resources.SECRETS, name, {"metadata": {"finalizers": None}}, namespace)
        await kube.delete(resources.SECRETS, name, namespace)
        await kube.delete(VMS, "vm1", namespace)
        operator.start()
        deleted = lambda: gone(kube, "vm1", namespace)  # noqa: E731
        await eventually("the VM to be deleted without its Secret", deleted, 60)
    finally:
        await delete_all(kube, namespace, [name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])


async def test_another_management_clusters_domain_of_the_same_name_is_neither_taken_nor_deleted(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    """Two management clusters share the hypervisor, and each has a LibvirtVM `<namespace>/vm1`: ours
    refuses the other's domain before it writes anything, and its deletion leaves that domain alone."""
    hv = hypervisors[0]
    theirs = domains.DomainPlan(
        name=f"{namespace}_vm1",
        uuid=names.domain_uuid(namespace, "vm1"),
        owner=domains.Owner(namespace, "vm1", "capfleet-0ther0c1u5ter"),
        vcpus=1,
        memory_mib=64,
        disks=(),
        seed_path="/nonexistent/cidata.iso",
        interfaces=(),
    )
    conn = hv.connect()
    try:
        conn.defineXML(domains.domain_xml(theirs))
    finally:
        conn.close()
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    try:
        await create_vm(kube, namespace, "vm1", NO_CALLBACK, powerState="Off")
        refused = await wait_condition(kube, VMS, "vm1", namespace, "DisksReady", "False", 60)
        assert (condition(refused, "DisksReady") or {}).get("reason") == "DomainNameTaken"
        recorded = refused["metadata"]["annotations"]["libvirt.capfleet.dev/owner-instance"]
        cluster = await kube.get(resources.NAMESPACES, "kube-system")
        assert cluster is not None
        assert recorded == instances.derived(cluster["metadata"]["uid"]), "derived from this cluster"
        assert leftovers(hv, namespace) == ([f"{namespace}_vm1"], []), (
            "no volume made beside a foreign domain"
        )
        await kube.delete(VMS, "vm1", namespace)
        await eventually("our VM to be deleted", lambda: gone(kube, "vm1", namespace), 60)
        assert leftovers(hv, namespace) == ([f"{namespace}_vm1"], []), "their domain is left alone"
        reasons = [e.get("reason") for e in await kube.list(resources.EVENTS, namespace)]
        assert "DomainNotOwned" in reasons
    finally:
        remove_domains(hv, namespace)
        await delete_all(kube, namespace, [name])


async def gone(kube: Kube, name: str, namespace: str | None, resource: Resource = VMS) -> bool:
    return await kube.get(resource, name, namespace) is None


def remove_domains(hv: Hypervisor, namespace: str) -> None:
    """What a person does once a detached VM's host is back: remove its domain and volumes by hand."""
    conn = hv.connect()
    try:
        for domain in conn.listAllDomains(0):
            if domain.name().startswith(f"{namespace}_"):
                domain.undefine()
        pool = conn.storagePoolLookupByName(hv.pool_name)
        pool.refresh(0)
        for volume in pool.listAllVolumes(0):
            if volume.name().startswith(f"{namespace}_"):
                volume.delete(0)
    finally:
        conn.close()


def volume_of(hv: Hypervisor, name: str) -> tuple[int, bytes]:
    """The volume's capacity, and its first MiB."""
    conn = hv.connect()
    try:
        volume = conn.storagePoolLookupByName(hv.pool_name).storageVolLookupByName(name)
        stream = conn.newStream(0)
        volume.download(stream, 0, 1 << 20, 0)
        chunks = []
        while chunk := stream.recv(1 << 16):
            chunks.append(chunk)
        stream.finish()
        return int(volume.info()[1]), b"".join(chunks)
    finally:
        conn.close()
