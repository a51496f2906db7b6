"""A HybridMachine's reconcile against an in-memory API: children built typed, steps folded into status.

The integration suites run the same flows on a real control plane; these pin the glue's own decisions
(what it creates, in which order, what it records) in milliseconds.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capfleet import errors, events, ownership, pausing, resources
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstanceSpec
from capfleet.api.libvirt import LibvirtVMSpec
from capfleet.controller import engine
from capfleet.controller.caches import WatchCache
from capfleet.controller.writes import RecordingKube
from capfleet.resources import Resource
from capi_machine_glue import deletions, inheritance, machines, summaries
from capi_machine_glue.contexts import Context
from capi_machine_glue.settings import GlueSettings

NS = "ns"
POOL = {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"}
READY = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
VM = {
    "vm": {"vcpus": 1, "memoryMiB": 512, "disks": [{"sizeGiB": 1, "image": "base"}]},
    "network": {"interfaces": [{"name": "eth0", "bridge": "br0", "ipPoolRefs": [POOL]}]},
}
METAL = {
    "baremetal": {"osProfile": {"kernelURL": "http://b/k", "initrdURL": "http://b/i"}},
    "network": {"interfaces": [{"name": "eno1", "ipPoolRefs": [POOL]}]},
}
Obj = dict[str, Any]
SHARD = ownership.WATCH_FILTER_LABEL


def _merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    """The few API calls the glue makes, on a dict; deletion waits while finalizers remain."""

    field_manager = "capi-machine-glue"

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.created: list[str] = []
        self.events: list[tuple[str, str, str]] = []  # involved object's name, type, reason
        self.gets: list[str] = []
        self.deletes: list[str] = []
        self.status_patches: list[str] = []
        # How old a child is when the glue first reads it back: older than the grace for a first report,
        # unless a test says otherwise, so each step's waiting is written.
        self.children_age_seconds = 60.0

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        assert resource == resources.EVENTS, "the glue creates its children with create_or_get"
        self.events.append((body["involvedObject"]["name"], body["type"], body["reason"]))
        return body

    def put(self, resource: Resource, body: Obj) -> None:
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", NS)
        meta.setdefault("uid", f"uid-{resource.plural}-{meta['name']}")
        meta.setdefault("generation", 1)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        self.objects[(resource.plural, meta["name"])] = body

    def obj(self, resource: Resource, name: str) -> Obj:
        return self.objects[(resource.plural, name)]

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        self.gets.append(resource.kind)
        return copy.deepcopy(self.objects.get((resource.plural, name)))

    async def create_or_get(self, resource: Resource, body: Obj, namespace: str | None = None) -> Any:
        key = (resource.plural, body["metadata"]["name"])
        if key not in self.objects:
            made = copy.deepcopy(body)
            created = datetime.now(UTC) - timedelta(seconds=self.children_age_seconds)
            made["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
            self.put(resource, made)
            self.created.append(f"{resource.kind}/{key[1]}")
        return copy.deepcopy(self.objects[key]), True

    async def patch(
        self, resource: Resource, name: str, patch: Obj, namespace: str | None = None, **_: Any
    ) -> Obj:
        found = self.obj(resource, name)
        _merge(found, patch)
        if "spec" in patch:  # as the API server does for a custom resource with a status subresource
            found["metadata"]["generation"] += 1
        return copy.deepcopy(found)

    async def patch_status(
        self, resource: Resource, name: str, patch: Obj, namespace: str | None = None
    ) -> None:
        self.status_patches.append(f"{resource.kind}/{name}")
        _merge(self.obj(resource, name).setdefault("status", {}), patch)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> Obj:
        self.deletes.append(f"{resource.kind}/{name}")
        found = self.obj(resource, name)
        if "resourceVersion" in found["metadata"]:
            found["metadata"]["resourceVersion"] = str(int(found["metadata"]["resourceVersion"]) + 1)
        if found["metadata"].get("finalizers"):
            found["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:
            del self.objects[(resource.plural, name)]
        return copy.deepcopy(found)

    def bind_claims(self) -> None:
        for (plural, name), claim in list(self.objects.items()):
            if plural == resources.IP_ADDRESS_CLAIMS.plural and not claim.get("status"):
                claim["status"] = {"addressRef": {"name": name}, "conditions": [READY]}
                spec = {"claimRef": {"name": name}, "poolRef": POOL, "address": "10.0.0.7", "prefix": 24}
                self.put(
                    resources.IP_ADDRESSES,
                    {"metadata": {"name": name}, "spec": {**spec, "gateway": "10.0.0.1"}},
                )


@pytest.fixture
def api() -> FakeKube:
    api = FakeKube()
    infrastructure = {"apiGroup": kinds.INFRASTRUCTURE_GROUP, "kind": "HybridCluster", "name": "c1"}
    initialization = {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    api.put(
        resources.CAPI_CLUSTERS,
        {
            "metadata": {"name": "c1"},
            "spec": {"infrastructureRef": infrastructure},
            "status": {"initialization": initialization},
        },
    )
    hybrid_cluster = {
        "controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443},
        "netbox": {"connectionSecretRef": {"name": "netbox"}},
        "baremetal": {"bmcCredentialsSecretRef": {"name": "bmc"}, "bmcAddressTemplate": "ipmi://{address}"},
    }
    api.put(kinds.HYBRID_CLUSTER.resource, {"metadata": {"name": "c1"}, "spec": hybrid_cluster})
    return api


def machine(api: FakeKube, name: str, spec: Obj) -> None:
    labels = {"cluster.x-k8s.io/cluster-name": "c1"}
    machine_spec = {"clusterName": "c1", "bootstrap": {"dataSecretName": f"{name}-data"}}
    api.put(resources.CAPI_MACHINES, {"metadata": {"name": name, "labels": labels}, "spec": machine_spec})
    owner = {"apiVersion": resources.CAPI_MACHINES.api_version, "kind": "Machine", "name": name, "uid": "m"}
    meta = {"name": name, "labels": labels, "ownerReferences": [owner]}
    api.put(kinds.HYBRID_MACHINE.resource, {"metadata": meta, "spec": copy.deepcopy(spec)})


def context(api: FakeKube) -> Context:
    settings = GlueSettings(deletion_poll_seconds=0.5)
    cache = WatchCache()
    recording = RecordingKube(api, cache)  # type: ignore[arg-type]
    return Context(recording, events.Recorder(api), cache, settings, reads=api)  # type: ignore[arg-type]


async def reconcile(ctx: Context, name: str) -> None:
    """One reconcile of the machine as the API server has it (the engine reconciles no machine being
    deleted: it finalizes it)."""
    body = await ctx.kube.get(kinds.HYBRID_MACHINE.resource, name, NS)
    if body is not None and not body["metadata"].get("deletionTimestamp"):
        await machines.reconcile(ctx, body)


async def vm_made(api: FakeKube, name: str) -> tuple[Context, Obj]:
    """A VM machine reconciled until its address is bound and its LibvirtVM made (as the API holds it)."""
    machine(api, name, VM)
    ctx = context(api)
    await reconcile(ctx, name)
    api.bind_claims()
    await reconcile(ctx, name)
    return ctx, api.obj(kinds.LIBVIRT_VM.resource, name)


def conditions(api: FakeKube, name: str) -> dict[str, str]:
    found = api.obj(kinds.HYBRID_MACHINE.resource, name)["status"]["conditions"]
    return {c["type"]: c["reason"] for c in found}


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


async def held_by_its_server(api: FakeKube, name: str) -> tuple[Context, Obj]:
    """A server machine, reconciled, and its BaremetalInstance holding on with a finalizer."""
    machine(api, name, METAL)
    ctx = context(api)
    await reconcile(ctx, name)
    owner = api.obj(kinds.HYBRID_MACHINE.resource, name)
    held = {
        "name": name,
        "finalizers": ["x"],
        "ownerReferences": [{"uid": owner["metadata"]["uid"]}],
        "resourceVersion": "1",
    }
    api.put(kinds.BAREMETAL_INSTANCE.resource, {"metadata": held, "spec": {}})
    return ctx, owner


async def test_deletion_takes_the_server_first_and_polls_at_the_setting(api: FakeKube) -> None:
    ctx, owner = await held_by_its_server(api, "w-0")
    api.gets.clear()
    with pytest.raises(deletions.ChildrenRemaining, match="BaremetalInstance w-0") as waiting:
        await deletions.delete(ctx, owner)
    assert waiting.value.delay(0) == 0.5
    assert api.gets == ["Cluster", "BaremetalInstance"], "a server's deletion asks for no VM"
    assert (kinds.NETBOX_DEVICE.resource.plural, "w-0") in api.objects
    del api.objects[(kinds.BAREMETAL_INSTANCE.resource.plural, "w-0")]
    with pytest.raises(deletions.ChildrenRemaining, match="NetboxDevice w-0, IPAddressClaim w-0-eno1-0"):
        await deletions.delete(ctx, owner)
    await deletions.delete(ctx, owner)


async def test_a_deletion_woken_by_a_change_reads_the_watch_cache_any_other_the_api_server(
    api: FakeKube,
) -> None:
    ctx, owner = await held_by_its_server(api, "w-0")
    ctx.cache.seen(kinds.HYBRID_MACHINE.resource, owner)
    ctx.cache.seen(kinds.BAREMETAL_INSTANCE.resource, api.obj(kinds.BAREMETAL_INSTANCE.resource, "w-0"))
    ctx.cache.seen(resources.CAPI_CLUSTERS, api.obj(resources.CAPI_CLUSTERS, "c1"))
    cached = dataclasses.replace(ctx, reads=ctx.cache.reader(api))
    api.gets.clear()
    with pytest.raises(deletions.ChildrenRemaining, match="BaremetalInstance w-0"):
        await deletions.delete(cached, owner)
    assert api.gets == []
    with pytest.raises(deletions.ChildrenRemaining, match="BaremetalInstance w-0"):
        await deletions.delete(cached, owner)  # before the watch shows the deletion the first look asked for
    assert api.deletes == ["BaremetalInstance/w-0"], "the answer to the deletion is kept in the watch cache"
    with pytest.raises(deletions.ChildrenRemaining, match="BaremetalInstance w-0"):
        await deletions.delete(ctx, api.obj(kinds.HYBRID_MACHINE.resource, "w-0"))
    assert api.gets == ["Cluster", "BaremetalInstance"]


async def test_deletion_right_after_an_unpause_takes_the_mirrored_pause_off_the_children(
    api: FakeKube,
) -> None:
    """A machine deleted before a reconcile saw the unpause: its children still carry the paused
    annotation the glue mirrored onto them, and their operators (ipam-address releases nothing for a
    paused claim) would wait for ever. Deletion takes the annotation off, then deletes."""
    machine(api, "w-0", METAL)
    ctx = context(api)
    await reconcile(ctx, "w-0")
    claim = api.obj(resources.IP_ADDRESS_CLAIMS, "w-0-eno1-0")
    claim["metadata"]["finalizers"] = ["ipam.cluster.x-k8s.io/ReleaseAddress"]
    claim["metadata"]["annotations"] = {pausing.PAUSED_ANNOTATION: "true"}
    owner = api.obj(kinds.HYBRID_MACHINE.resource, "w-0")
    with pytest.raises(deletions.ChildrenRemaining, match="IPAddressClaim w-0-eno1-0"):
        await deletions.delete(ctx, owner)
    claim = api.obj(resources.IP_ADDRESS_CLAIMS, "w-0-eno1-0")
    assert claim["metadata"]["deletionTimestamp"]
    assert not pausing.annotated(claim["metadata"])


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


async def test_a_deletion_says_what_it_waits_for_only_once_it_has_waited_the_grace(api: FakeKube) -> None:
    ctx, owner = await held_by_its_server(api, "w-0")
    api.status_patches.clear()

    owner["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(deletions.ChildrenRemaining):
        await deletions.delete(ctx, owner)
    assert api.status_patches == []

    long_ago = datetime.now(UTC) - timedelta(seconds=deletions.DELETION_REPORT_GRACE_SECONDS + 1)
    owner["metadata"]["deletionTimestamp"] = long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(deletions.ChildrenRemaining):
        await deletions.delete(ctx, owner)
    assert conditions(api, "w-0")["Ready"] == "Deleting"
    assert api.status_patches == ["HybridMachine/w-0"]
