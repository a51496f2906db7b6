"""What a tenant's VM may use on a real hypervisor, and nothing more: it clones only the base images its
Hypervisor offers, attaches only to the networks offered to its namespace, and boots only with a user-data
Secret meant for VMs (never the cluster's CA), whether it is placed by the rules or names its host. A VM
held back is neither placed nor built, and goes on once an administrator (or the Secret's owner) allows it."""

from __future__ import annotations

import json
import secrets

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
    vm_body,
    wait_condition,
)

from capfleet import resources
from capfleet.api.libvirt import USER_DATA_LABEL
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.hypervisor import Hypervisor

pytestmark = pytest.mark.integration


async def test_a_vm_clones_only_the_base_images_its_hypervisor_offers(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    """The pool holds more than base images: a volume the Hypervisor does not list in `spec.baseImages` is
    never cloned, neither by a VM placed by the rules nor by one whose spec names the host; nothing is
    made on the host, and once an administrator lists the volume both VMs go on."""
    hv = hypervisors[0]
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    private = f"private-{secrets.token_hex(3)}.qcow2"
    precreate_volume(hv, private, 1 << 30, "qcow2")
    name = await create_hypervisor(kube, namespace, hv, base_images=("capfleet-test-*.qcow2",))
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        disks = [{"name": "root", "sizeGiB": 1, "sourceImage": private}]
        await create_vm(kube, namespace, "greedy", NO_CALLBACK, disks=disks)
        await create_vm(kube, namespace, "pinned", NO_CALLBACK, disks=disks, hypervisorName=name)
        greedy = await wait_condition(kube, VMS, "greedy", namespace, "Scheduled", "False", 30)
        assert (condition(greedy, "Scheduled") or {}).get("reason") == "BaseImageNotOffered"
        assert private in (condition(greedy, "Scheduled") or {}).get("message", "")
        pinned = await wait_condition(kube, VMS, "pinned", namespace, "DisksReady", "False", 30)
        assert (condition(pinned, "DisksReady") or {}).get("reason") == "BaseImageNotOffered"
        assert leftovers(hv, namespace) == ([], [])

        offer = {"spec": {"baseImages": ["capfleet-test-*.qcow2", private]}}
        await kube.patch(HYPERVISORS, name, offer)
        await wait_condition(kube, VMS, "pinned", namespace, "DisksReady", "True", 90)
        await wait_condition(kube, VMS, "greedy", namespace, "DisksReady", "True", 90)
    finally:
        await delete_all(kube, namespace, [name])
        remove_volume(hv, private)


async def test_a_vm_whose_user_data_secret_is_not_meant_for_vms_is_neither_placed_nor_built(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    """libvirt-vm reads user-data with its own rights: a VM naming the cluster's CA Secret (or any Secret
    not labelled for VMs) is not placed and nothing of the Secret reaches a seed; labelled but without the
    key the VM names, it is not placed either; with the key, it goes on."""
    hv = hypervisors[0]
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    name = await create_hypervisor(kube, namespace, hv)
    ca_marker = f"ca-key-{secrets.token_hex(8)}"  # stands for the CA's key: only its absence is checked
    ca = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "c1-ca", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": b64(ca_marker)},
    }
    try:
        await kube.create(resources.SECRETS, ca, namespace)
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        body = vm_body("curious", namespace)
        body["spec"]["cloudInit"] = {"userDataSecretRef": {"name": "c1-ca", "key": "userdata"}}
        body["spec"]["disks"] = [{"name": "root", "sizeGiB": 1}]  # an empty disk: this test is about the seed
        await kube.create(VMS, body, namespace)
        vm = await wait_condition(kube, VMS, "curious", namespace, "Scheduled", "False", 30)
        scheduled = condition(vm, "Scheduled") or {}
        assert scheduled.get("reason") == "UserDataSecretNotForVMs"
        assert ca_marker not in json.dumps(vm)
        assert not vm["spec"].get("hypervisorName"), "not placed: it takes no room and no quota"
        assert leftovers(hv, namespace) == ([], [])

        label = {"metadata": {"labels": {USER_DATA_LABEL: "true"}}}
        await kube.patch(resources.SECRETS, "c1-ca", label, namespace)  # its owner says it is meant for VMs
        vm = await wait_condition(
            kube, VMS, "curious", namespace, "Scheduled", "False", 30, reason="SecretKeyMissing"
        )
        assert not vm["spec"].get("hypervisorName"), "a seed without its user-data is not built"
        assert leftovers(hv, namespace) == ([], [])

        user_data = {"data": {"userdata": b64("#cloud-config\n")}}
        await kube.patch(resources.SECRETS, "c1-ca", user_data, namespace)
        await wait_condition(kube, VMS, "curious", namespace, "SeedReady", "True", 90)
    finally:
        await delete_all(kube, namespace, [name])


async def test_a_vm_attaches_only_to_what_its_hypervisor_offers_its_namespace(
    kube: Kube, namespace: str, run_operator: RunOperator, hypervisors: list[Hypervisor]
) -> None:
    """A tenant's VM on the provisioning network would be a server there: an interface attaches only to a
    bridge, network or user-mode networking its Hypervisor lists in `spec.networks` for the VM's
    namespace, whether the VM is placed by the rules or names its hypervisor; nothing is defined."""
    hv = hypervisors[0]
    run_operator("libvirt_vm", env=OPERATOR_ENV)
    offered: tuple[dict[str, object], ...] = (
        {"bridge": "br-nodes"},
        {"userMode": True, "namespaces": ["ops"]},
    )
    name = await create_hypervisor(kube, namespace, hv, networks=offered)
    try:
        await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        disks = [{"name": "root", "sizeGiB": 1}]
        await create_vm(kube, namespace, "roamer", NO_CALLBACK, disks=disks)  # user-mode, offered to ops only
        await create_vm(kube, namespace, "pinned", NO_CALLBACK, disks=disks, hypervisorName=name)
        roamer = await wait_condition(kube, VMS, "roamer", namespace, "Scheduled", "False", 30)
        assert (condition(roamer, "Scheduled") or {}).get("reason") == "NetworkNotOffered"
        pinned = await wait_condition(kube, VMS, "pinned", namespace, "Defined", "False", 60)
        assert (condition(pinned, "Defined") or {}).get("reason") == "NetworkNotOffered"
        assert leftovers(hv, namespace)[0] == [], "no domain defined"

        offer = {"spec": {"networks": [*offered, {"userMode": True, "namespaces": [namespace]}]}}
        await kube.patch(HYPERVISORS, name, offer)
        await wait_condition(kube, VMS, "pinned", namespace, "Defined", "True", 90)
        await wait_condition(kube, VMS, "roamer", namespace, "Scheduled", "True", 90)
    finally:
        await delete_all(kube, namespace, [name])
