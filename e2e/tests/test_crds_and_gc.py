"""capfleet's generated CRDs on a real apiserver, and the real garbage collector the fleet relies on.

Every CRD must install with its labels, accept a valid object of its kind, and refuse the invalid ones
with a message a person can act on. Ownership chains must cascade through two levels, and a foreground
delete must wait for a child's finalizer: deletion in capfleet is built on exactly that.
"""

from __future__ import annotations

import copy
from collections.abc import Coroutine
from typing import Any

import pytest

from capfleet import ownership, resources
from capfleet.api import kinds, samples
from capfleet.kube import Invalid, Kube
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

HOLD_FINALIZER = "test.capfleet.dev/hold"


def sample_of(kind: kinds.Kind[Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(next(s for s in samples.valid_samples() if s["kind"] == kind.kind))
    obj["metadata"] = {"name": name}
    return obj


async def test_every_crd_is_established_with_its_labels(kube: Kube) -> None:
    for kind in kinds.ALL:
        crd = await kube.get(
            resources.CUSTOM_RESOURCE_DEFINITIONS, f"{kind.resource.plural}.{kind.resource.group}"
        )
        assert crd is not None, kind.kind
        established = [c for c in crd["status"]["conditions"] if c["type"] == "Established"]
        assert established, kind.kind
        assert established[0]["status"] == "True", kind.kind
        labels = crd["metadata"]["labels"]
        assert "clusterctl.cluster.x-k8s.io" in labels, kind.kind
        if kind.resource.group == "infrastructure.cluster.x-k8s.io":
            assert labels["cluster.x-k8s.io/v1beta2"] == "v1alpha1", kind.kind


async def test_valid_samples_are_accepted_and_defaulted(kube: Kube, namespace: str) -> None:
    for obj in samples.valid_samples():
        kind = kinds.by_kind(obj["kind"])
        ns = namespace if kind.resource.namespaced else None
        if not kind.resource.namespaced:
            obj = {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-{namespace}"}}
        created = await kube.create(kind.resource, obj, ns)
        assert created["metadata"]["uid"], kind.kind
        kind.parse(created)  # what the apiserver returns (with defaults) parses back into the model
        if not kind.resource.namespaced:
            await kube.delete(kind.resource, obj["metadata"]["name"])
    pool_sample = next(s for s in samples.valid_samples() if s["kind"] == "HybridIPPool")
    assert "allocateReservedIPAddresses" not in pool_sample["spec"]
    pool = await kube.get(kinds.HYBRID_IPPOOL.resource, pool_sample["metadata"]["name"], namespace)
    assert pool is not None
    assert pool["spec"]["allocateReservedIPAddresses"] is False, (
        "the CRD's default is applied by the apiserver"
    )


@pytest.mark.parametrize("invalid", samples.invalid_samples(), ids=lambda invalid: invalid.name)
async def test_invalid_objects_are_refused_with_a_readable_message(
    kube: Kube, namespace: str, invalid: samples.Invalid
) -> None:
    resource = kinds.by_kind(invalid.obj["kind"]).resource
    name = invalid.obj["metadata"]["name"]
    submit: Coroutine[Any, Any, object]
    if invalid.before is None:
        submit = kube.create(resource, invalid.obj, namespace)
    else:
        await kube.create(resource, invalid.before, namespace)
        submit = kube.patch(resource, name, {"spec": invalid.obj["spec"]}, namespace)
    with pytest.raises(Invalid) as refused:
        await submit
    assert invalid.message in refused.value.message
    if invalid.before is None:
        assert await kube.get(resource, name, namespace) is None, "nothing is half-created"


async def test_garbage_collector_cascades_through_two_levels(kube: Kube, namespace: str) -> None:
    machine = await kube.create(
        kinds.HYBRID_MACHINE.resource, sample_of(kinds.HYBRID_MACHINE, "m1"), namespace
    )
    vm_body = sample_of(kinds.LIBVIRT_VM, "m1-vm")
    vm_body["metadata"] = ownership.child_metadata("m1-vm", machine)
    vm = await kube.create(kinds.LIBVIRT_VM.resource, vm_body, namespace)
    seed = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ownership.child_metadata("m1-seed", vm)}
    await kube.create(resources.CONFIGMAPS, seed, namespace)

    assert await kube.delete(kinds.HYBRID_MACHINE.resource, "m1", namespace, propagation="Background")

    async def all_gone() -> bool:
        vm_left = await kube.get(kinds.LIBVIRT_VM.resource, "m1-vm", namespace)
        seed_left = await kube.get(resources.CONFIGMAPS, "m1-seed", namespace)
        return vm_left is None and seed_left is None

    await eventually("the garbage collector to delete the child and the grandchild", all_gone, within=90)


async def test_foreground_delete_waits_for_a_childs_finalizer(kube: Kube, namespace: str) -> None:
    machine = await kube.create(
        kinds.HYBRID_MACHINE.resource, sample_of(kinds.HYBRID_MACHINE, "m2"), namespace
    )
    vm_body = sample_of(kinds.LIBVIRT_VM, "m2-vm")
    vm_body["metadata"] = {**ownership.child_metadata("m2-vm", machine), "finalizers": [HOLD_FINALIZER]}
    await kube.create(kinds.LIBVIRT_VM.resource, vm_body, namespace)

    await kube.delete(kinds.HYBRID_MACHINE.resource, "m2", namespace, propagation="Foreground")

    async def child_deleting() -> dict[str, Any] | None:
        child = await kube.get(kinds.LIBVIRT_VM.resource, "m2-vm", namespace)
        return child if child and child["metadata"].get("deletionTimestamp") else None

    await eventually("the garbage collector to delete the child first", child_deleting, within=90)
    parent = await kube.get(kinds.HYBRID_MACHINE.resource, "m2", namespace)
    assert parent is not None, "the parent must wait for its child's finalizer"
    assert "foregroundDeletion" in parent["metadata"]["finalizers"]

    await kube.patch(kinds.LIBVIRT_VM.resource, "m2-vm", {"metadata": {"finalizers": None}}, namespace)

    async def parent_gone() -> bool:
        return await kube.get(kinds.HYBRID_MACHINE.resource, "m2", namespace) is None

    await eventually("the parent to go once its child is gone", parent_gone, within=90)


async def test_an_unknown_field_is_refused_not_pruned(kube: Kube, namespace: str) -> None:
    """The fleet's client asks for strict field validation: a misspelt key fails loudly on create and on
    patch, where the apiserver's default would drop it silently and leave the object unchanged."""
    kind = kinds.LIBVIRT_VM
    obj = sample_of(kind, "strict")
    obj["spec"]["memoryMib"] = 2048  # misspelt: memoryMiB
    with pytest.raises(Invalid) as refused:
        await kube.create(kind.resource, obj, namespace)
    assert "memoryMib" in str(refused.value)
    del obj["spec"]["memoryMib"]
    await kube.create(kind.resource, obj, namespace)
    with pytest.raises(Invalid) as refused:
        await kube.patch(kind.resource, "strict", {"spec": {"vcpu": 4}}, namespace)
    assert "vcpu" in str(refused.value)
    kept = await kube.get(kind.resource, "strict", namespace)
    assert kept is not None
    assert "vcpu" not in kept["spec"]
