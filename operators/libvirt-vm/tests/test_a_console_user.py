"""The tenant suite: a console user, with the token of a ServiceAccount bound to the shipped console role in
their namespace, tries each way across the VM boundary against a running libvirt-vm (its own
ServiceAccount, the shipped RBAC and admission policies) and a real hypervisor. Each try is refused
clearly, at admission or as a condition and an Event; nothing of another's is read, nothing is made on the
hypervisor for a refused VM, and the namespace's VMQuota counts exactly the one VM that was allowed."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from libvirt_vm_helpers import (
    HYPERVISORS,
    NO_CALLBACK,
    OPERATOR_ENV,
    VMS,
    b64,
    condition,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    precreate_volume,
    remove_volume,
    wait_condition,
)

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Forbidden, Invalid, Kube, KubeError
from capfleet_e2e.console import console_user
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.serviceaccounts import RunOperatorAs, apply_operator_rbac, forbidden_requests
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
QUOTAS = kinds.VM_QUOTA.resource
DETACHED = "libvirt.capfleet.dev/detached"
ROOT = {"name": "root", "sizeGiB": 1}
# What libvirt-vm holds back, and why: each a VM the tenant may create, which is never placed.
HELD_BACK = {
    "greedy": "BaseImageNotOffered",
    "curious": "UserDataSecretNotForVMs",
    "roamer": "NetworkNotOffered",
}


async def quota_used(kube: Kube, namespace: str) -> dict[str, Any] | None:
    status = ((await kube.get(QUOTAS, "team", namespace)) or {}).get("status") or {}
    used: dict[str, Any] | None = status.get("used")
    return used


async def counted(kube: Kube, namespace: str, wanted: dict[str, int]) -> None:
    async def counts() -> bool | None:
        return True if await quota_used(kube, namespace) == wanted else None

    await eventually(f"VMQuota team to count {wanted}", counts, 60)


async def refused(attempt: Any) -> str:
    """The API server's refusal of an awaited request: its message (the test fails if it went through)."""
    try:
        await attempt
    except (Forbidden, Invalid) as error:
        return str(error)
    raise AssertionError("the request went through")


async def test_a_console_user_is_refused_every_crossing_and_the_quota_counts_only_what_was_allowed(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    tmp_path: Path,
) -> None:
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    private = f"private-{secrets.token_hex(3)}.qcow2"  # in the pool, not offered: another's disk, say
    precreate_volume(hv, private, 1 << 30, "qcow2")
    apply_operator_rbac(control_plane.kubectl, "console")  # the console user role, as the overlay ships it
    token = console_user(control_plane, namespace, "alice", bound=True)
    assert control_plane.ca_path is not None
    alice_config = write_kubeconfig(
        tmp_path / "alice.kubeconfig",
        control_plane.server,
        control_plane.ca_path,
        f"system:serviceaccount:{namespace}:alice",
        token,
    )
    operator = run_operator_as("libvirt_vm", "libvirt-vm", secrets_in=[namespace], env=OPERATOR_ENV)
    offered = ({"userMode": True, "namespaces": [namespace]},)
    name = await create_hypervisor(
        kube, namespace, hv, base_images=("capfleet-test-*.qcow2",), networks=offered
    )
    ca_marker = f"ca-key-{secrets.token_hex(8)}"  # stands for the cluster CA's key
    ca = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "c1-ca", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": b64(ca_marker)},
    }
    quota = {"apiVersion": QUOTAS.api_version, "kind": "VMQuota", "metadata": {"name": "team"}}
    try:
        await kube.create(resources.SECRETS, ca, namespace)
        await kube.create(QUOTAS, {**quota, "spec": {"hard": {"vms": 2}}}, namespace)
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        async with Kube.connect("alice", str(alice_config)) as alice:
            # Refused at admission: placement, another VM's volume, the CA Secret, the quota.
            pinned = create_vm(alice, namespace, "pinned", NO_CALLBACK, disks=[ROOT], hypervisorName=name)
            assert "placement" in await refused(pinned)
            thief = [{**ROOT, "sourceImage": f"{namespace}_victim_root.qcow2"}]
            assert "sourceImage" in await refused(
                create_vm(alice, namespace, "thief", NO_CALLBACK, disks=thief)
            )
            moved = {"data": {"value": b64("#cloud-config\n")}}
            await refused(alice.patch(resources.SECRETS, "c1-ca", moved, namespace))
            with pytest.raises(KubeError):  # reading it, even
                await alice.get(resources.SECRETS, "c1-ca", namespace)
            await refused(alice.patch(QUOTAS, "team", {"spec": {"hard": {"vms": 100}}}, namespace))

            # Held back by libvirt-vm: each told why, none placed, nothing built.
            await create_vm(alice, namespace, "greedy", NO_CALLBACK, disks=[{**ROOT, "sourceImage": private}])
            curious = {"userDataSecretRef": {"name": "c1-ca", "key": "value"}}
            await create_vm(alice, namespace, "curious", NO_CALLBACK, disks=[ROOT], cloudInit=curious)
            bridge = [{"bridge": "br-provisioning", "macAddress": "52:54:00:12:34:57"}]
            await create_vm(alice, namespace, "roamer", NO_CALLBACK, disks=[ROOT], interfaces=bridge)
            for vm, reason in HELD_BACK.items():
                held = await wait_condition(kube, VMS, vm, namespace, "Scheduled", "False", 60, reason=reason)
                assert not held["spec"].get("hypervisorName"), f"{vm} was placed"
            for found in await kube.list(VMS, namespace):
                assert ca_marker not in json.dumps(found), "nothing of the CA Secret in any VM"
            assert leftovers(hv, namespace) == ([], [])
            none = {"vcpus": 0, "memoryMiB": 0, "storageGiB": 0, "vms": 0}
            await counted(kube, namespace, none)

            # Within the rules: placed and counted, and still theirs only as far as the rules go.
            await create_vm(alice, namespace, "honest", NO_CALLBACK, disks=[ROOT])
            await wait_condition(kube, VMS, "honest", namespace, "Scheduled", "True", 60)
            one = {"vcpus": 1, "memoryMiB": 192, "storageGiB": 1, "vms": 1}
            await counted(kube, namespace, one)
            detach = {"metadata": {"annotations": {DETACHED: "true"}}}
            await refused(alice.patch(VMS, "honest", detach, namespace))
            elsewhere = {"spec": {"hypervisorName": f"{name}-other"}}
            await refused(alice.patch(VMS, "honest", elsewhere, namespace))
            domains, _ = leftovers(hv, namespace)
            assert set(domains) <= {f"{namespace}_honest"}, "only the allowed VM exists on the host"

        events = [e for e in await kube.list(resources.EVENTS, namespace) if e.get("type") == "Warning"]
        told = {(e["involvedObject"]["name"], e["reason"]) for e in events}
        assert set(HELD_BACK.items()) <= told, "each held-back VM got a Warning Event saying why"
        for vm, reason in HELD_BACK.items():
            message = (condition(await kube.get(VMS, vm, namespace), "Scheduled") or {}).get("message")
            assert message, f"{vm}'s {reason} says what to change"
        assert await quota_used(kube, namespace) == one
    finally:
        await delete_all(kube, namespace, [name])
        remove_volume(hv, private)
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])
    assert operator.running()
    assert forbidden_requests(control_plane, "libvirt-vm", namespace=namespace) == []
