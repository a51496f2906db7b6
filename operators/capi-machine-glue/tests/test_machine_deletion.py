"""A HybridMachine's deletion against an in-memory API: the machine first, then what it held, the wait
said only once it has lasted, and reads from the watch cache when a change brought the deletion."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from glue_fakes import (
    METAL,
    FakeKube,
    Obj,
    conditions,
    context,
    machine,
    reconcile,
)
from glue_fakes import api as api  # the fixture

from capfleet import pausing, resources
from capfleet.api import kinds
from capi_machine_glue import deletions
from capi_machine_glue.contexts import Context


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
