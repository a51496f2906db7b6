"""A HybridMachine's reconcile against an in-memory API: children built typed, steps folded into status.

The integration suites run the same flows on a real control plane; these pin the glue's own decisions
(what it creates, in which order, what it records) in milliseconds. Deletion is in test_machine_deletion.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from glue_fakes import (
    METAL,
    READY,
    SHARD,
    VM,
    FakeKube,
    Obj,
    conditions,
    context,
    machine,
    reconcile,
    vm_made,
)
from glue_fakes import api as api  # the fixture

from capfleet import errors, pausing, resources
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstanceSpec
from capfleet.api.libvirt import LibvirtVMSpec
from capfleet.controller import engine
from capi_machine_glue import inheritance, machines, summaries


async def test_a_vm_machine_gets_its_address_then_a_typed_vm_and_follows_it(api: FakeKube) -> None:
    machine(api, "cp-0", VM)
    ctx = context(api)
    await reconcile(ctx, "cp-0")
    assert api.created == ["IPAddressClaim/cp-0-eth0-0"]
    assert conditions(api, "cp-0")["AddressesAllocated"] == "Pending"

    api.bind_claims()
    await reconcile(ctx, "cp-0")
    vm = LibvirtVMSpec.model_validate(api.obj(kinds.LIBVIRT_VM.resource, "cp-0")["spec"])
    assert [(nic.name, nic.addresses, nic.gateway) for nic in vm.interfaces] == [
        ("eth0", ["10.0.0.7/24"], "10.0.0.1")
    ]
    assert vm.cloud_init.meta_data["control-plane-endpoint-host"] == "10.0.0.5"
    assert conditions(api, "cp-0")["VMProvisioned"] == "Pending"

    vm_status = {"hypervisorName": "hv", "providerID": "capfleet://vm/hv/ns-cp-0", "conditions": [READY]}
    api.obj(kinds.LIBVIRT_VM.resource, "cp-0")["status"] = vm_status
    await reconcile(ctx, "cp-0")
    hybrid = api.obj(kinds.HYBRID_MACHINE.resource, "cp-0")
    assert hybrid["spec"]["providerID"] == "capfleet://vm/hv/ns-cp-0"
    assert hybrid["status"]["hypervisorName"] == "hv"
    assert hybrid["status"]["initialization"] == {"provisioned": True}
    assert conditions(api, "cp-0")["Ready"] == "Ready"


async def test_the_status_written_with_the_provider_id_observes_the_generation_that_patch_made(
    api: FakeKube,
) -> None:
    """The pass that sets spec.providerID writes conditions for the spec as it now is: otherwise the next
    pass rewrites every condition only to move observedGeneration on (one status patch per machine in
    make bench-fleet)."""
    ctx, _ = await vm_made(api, "cp-0")
    vm_status = {"hypervisorName": "hv", "providerID": "capfleet://vm/hv/ns-cp-0", "conditions": [READY]}
    api.obj(kinds.LIBVIRT_VM.resource, "cp-0")["status"] = vm_status
    await reconcile(ctx, "cp-0")
    hybrid = api.obj(kinds.HYBRID_MACHINE.resource, "cp-0")
    assert hybrid["metadata"]["generation"] == 2
    assert {c["observedGeneration"] for c in hybrid["status"]["conditions"]} == {2}
    written = len(api.status_patches)
    await reconcile(ctx, "cp-0")
    assert len(api.status_patches) == written


async def test_events_say_ready_and_what_the_glue_refuses_not_each_step_a_child_takes(
    api: FakeKube,
) -> None:
    ctx, vm = await vm_made(api, "cp-0")
    for reason in ("Scheduling", "Defining", "Starting"):
        waiting = {"type": "Ready", "status": "False", "reason": reason, "message": "on its way"}
        vm["status"] = {"conditions": [{**waiting, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        await reconcile(ctx, "cp-0")
        assert conditions(api, "cp-0")["Ready"] == reason
    assert api.events == [], "a child's steps are the child's Events"
    vm["status"] = {"hypervisorName": "hv", "providerID": "capfleet://vm/hv/ns-cp-0", "conditions": [READY]}
    await reconcile(ctx, "cp-0")
    await reconcile(ctx, "cp-0")
    assert api.events == [("cp-0", "Normal", "Ready")]
    vm["status"]["conditions"] = [{**READY, "status": "False", "reason": "Stopped"}]
    await reconcile(ctx, "cp-0")
    vm["status"]["conditions"] = [READY]
    await reconcile(ctx, "cp-0")
    assert api.events == [("cp-0", "Normal", "Ready")] * 2, "Ready again is news again"

    machine(api, "w-1", {**METAL, "network": {"interfaces": [{"name": "eno9"}]}})
    await reconcile(ctx, "w-1")
    api.obj(kinds.NETBOX_DEVICE.resource, "w-1")["status"] = {
        "deviceID": 7,
        "bmcAddress": "10.9.0.7",
        "interfaces": [{"name": "eno1", "macAddress": "52:54:00:aa:bb:07"}],
        "conditions": [READY],
    }
    for _ in range(2):
        with pytest.raises(errors.InvalidSpec):
            await reconcile(ctx, "w-1")
    assert api.events[2:] == [("w-1", "Warning", "UnknownInterface")], "one Warning, not one per retry"


async def test_once_the_node_joined_the_vm_drops_its_user_data_for_good(api: FakeKube) -> None:
    ctx, vm = await vm_made(api, "cp-0")
    assert "removeUserData" not in vm["spec"]["cloudInit"], "the VM boots with its bootstrap data"
    api.obj(resources.CAPI_MACHINES, "cp-0")["status"] = {"nodeRef": {"name": "cp-0"}}
    await reconcile(ctx, "cp-0")
    assert vm["spec"]["cloudInit"]["removeUserData"] is True
    api.obj(resources.CAPI_MACHINES, "cp-0")["status"] = {}  # as after a move, before CAPI finds the Node
    await reconcile(ctx, "cp-0")
    assert vm["spec"]["cloudInit"]["removeUserData"] is True


async def test_a_server_boots_with_its_interfaces_and_an_unknown_one_is_recorded(api: FakeKube) -> None:
    machine(api, "w-0", METAL)
    ctx = context(api)
    await reconcile(ctx, "w-0")
    api.bind_claims()
    device = {
        "deviceID": 7,
        "name": "srv-7",
        "bmcAddress": "10.9.0.7",
        "interfaces": [{"name": "eno1", "macAddress": "52:54:00:aa:bb:07"}],
        "conditions": [READY],
    }
    api.obj(kinds.NETBOX_DEVICE.resource, "w-0")["status"] = device
    await reconcile(ctx, "w-0")
    instance = BaremetalInstanceSpec.model_validate(api.obj(kinds.BAREMETAL_INSTANCE.resource, "w-0")["spec"])
    assert [(nic.name, nic.mac_address, nic.addresses) for nic in instance.interfaces] == [
        ("eno1", "52:54:00:aa:bb:07", ["10.0.0.7/24"])
    ]
    assert instance.meta_data["control-plane-endpoint-port"] == "6443"
    assert instance.network_data is None
    assert api.obj(kinds.HYBRID_MACHINE.resource, "w-0")["status"]["deviceID"] == 7

    machine(api, "w-1", {**METAL, "network": {"interfaces": [{"name": "eno9"}]}})
    await reconcile(ctx, "w-1")
    api.obj(kinds.NETBOX_DEVICE.resource, "w-1")["status"] = device
    with pytest.raises(errors.InvalidSpec, match="no interface eno9"):
        await reconcile(ctx, "w-1")
    assert conditions(api, "w-1")["ServerProvisioned"] == "UnknownInterface"


async def test_a_relabelled_machine_takes_its_children_to_its_new_shard_and_back_to_none(
    api: FakeKube,
) -> None:
    """Children are made with their owner's shard label; relabelled later, the machine's next reconcile
    relabels them too, so the new shard's operators serve them and the old shard's let them go."""

    def shards() -> dict[str, str | None]:
        owned = [
            o
            for o in api.objects.values()
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
        ]
        return {
            f"{o['kind']}/{o['metadata']['name']}": o["metadata"].get("labels", {}).get(SHARD) for o in owned
        }

    machine(api, "w-0", VM)
    owner = api.obj(kinds.HYBRID_MACHINE.resource, "w-0")
    uid = owner["metadata"]["uid"]
    owner["metadata"]["labels"][SHARD] = "a"
    ctx = context(api)
    await reconcile(ctx, "w-0")
    api.bind_claims()
    await reconcile(ctx, "w-0")
    assert shards() == {"IPAddressClaim/w-0-eth0-0": "a", "LibvirtVM/w-0": "a"}
    owner["metadata"]["labels"][SHARD] = "b"
    await reconcile(ctx, "w-0")
    assert set(shards().values()) == {"b"}
    del owner["metadata"]["labels"][SHARD]
    await reconcile(ctx, "w-0")
    assert set(shards().values()) == {None}


def test_inherited_patch_brings_pause_and_shard_in_line_and_leaves_a_deleting_child_alone() -> None:
    owner = {"metadata": {"labels": {SHARD: "b"}}}
    child: Obj = {"metadata": {"labels": {SHARD: "a"}, "annotations": {pausing.PAUSED_ANNOTATION: "true"}}}
    assert inheritance.inherited_patch(child, owner, paused=False) == {
        "metadata": {"annotations": {pausing.PAUSED_ANNOTATION: None}, "labels": {SHARD: "b"}}
    }
    assert inheritance.inherited_patch(child, owner, paused=True) == {"metadata": {"labels": {SHARD: "b"}}}
    assert inheritance.inherited_patch(child, {"metadata": {}}, paused=True) == {
        "metadata": {"labels": {SHARD: None}}
    }
    assert inheritance.inherited_patch({"metadata": {"labels": {SHARD: "b"}}}, owner, paused=False) is None
    child["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert inheritance.inherited_patch(child, {"metadata": {}}, paused=False) is None


async def test_a_new_machine_without_its_machine_owner_waits_a_moment_before_saying_so(api: FakeKube) -> None:
    """Cluster API sets the ownerReference within a second: a status saying it is missing is written only
    once the machine is older than the grace, not for every new machine."""
    just_now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = {"name": "orphan", "creationTimestamp": just_now}
    api.put(kinds.HYBRID_MACHINE.resource, {"metadata": meta, "spec": VM})
    ctx = context(api)
    with pytest.raises(engine.TimedWait) as waiting:
        await reconcile(ctx, "orphan")
    assert waiting.value.reason == "WaitingForMachine"
    assert "status" not in api.obj(kinds.HYBRID_MACHINE.resource, "orphan")

    older = datetime.now(UTC) - timedelta(seconds=machines.OWNER_GRACE_SECONDS + 1)
    meta["creationTimestamp"] = older.strftime("%Y-%m-%dT%H:%M:%SZ")
    await reconcile(ctx, "orphan")
    assert conditions(api, "orphan")["Ready"] == "WaitingForMachine"


async def test_a_child_just_created_is_waited_for_without_a_status_write_until_the_grace_is_over(
    api: FakeKube,
) -> None:
    """Children that report at once cost no 'has not reported yet' write: the VM machine's status is written
    once its VM runs. One that stays silent past the grace is named in the status."""
    api.children_age_seconds = 0.0
    machine(api, "cp-0", VM)
    ctx = context(api)
    with pytest.raises(machines.AwaitingReport) as waiting:
        await reconcile(ctx, "cp-0")
    assert 0 < waiting.value.seconds_left <= summaries.REPORT_GRACE_SECONDS
    delay = waiting.value.delay(0)
    assert delay is not None
    assert delay <= summaries.REPORT_GRACE_SECONDS + 1
    assert delay > waiting.value.seconds_left, "retried after the grace"
    assert api.created == ["IPAddressClaim/cp-0-eth0-0"]
    assert api.status_patches == []

    api.bind_claims()
    with pytest.raises(machines.AwaitingReport):
        await reconcile(ctx, "cp-0")
    assert api.created[-1] == "LibvirtVM/cp-0"
    assert api.status_patches == []

    vm_status = {"hypervisorName": "hv", "providerID": "capfleet://vm/hv/ns-cp-0", "conditions": [READY]}
    api.obj(kinds.LIBVIRT_VM.resource, "cp-0")["status"] = vm_status
    await reconcile(ctx, "cp-0")
    assert api.status_patches == ["HybridMachine/cp-0"]
    assert conditions(api, "cp-0")["Ready"] == "Ready"

    machine(api, "cp-1", VM)
    with pytest.raises(machines.AwaitingReport):
        await reconcile(ctx, "cp-1")
    long_ago = datetime.now(UTC) - timedelta(seconds=summaries.REPORT_GRACE_SECONDS + 1)
    claim = api.obj(resources.IP_ADDRESS_CLAIMS, "cp-1-eth0-0")
    claim["metadata"]["creationTimestamp"] = long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
    await reconcile(ctx, "cp-1")
    assert conditions(api, "cp-1")["AddressesAllocated"] == "Pending"
