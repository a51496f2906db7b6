"""The watch cache: events keep the newest object, a deletion forgets it, "not found" is kept only for the
kinds a controller creates and never over an event that came while the GET was under way."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Mapping
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.controller.caches import WatchCache

LIBVIRT_VMS = kinds.LIBVIRT_VM.resource
MACHINES = resources.CAPI_MACHINES
CHILDREN = (resources.IP_ADDRESS_CLAIMS, LIBVIRT_VMS, kinds.BAREMETAL_INSTANCE.resource)

Obj = dict[str, Any]


def obj(name: str, version: str, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version, **extra}}


class Api:
    """Counts GETs; `during_get` runs while one is under way (an event arriving meanwhile)."""

    def __init__(self, objects: dict[str, Obj] | None = None) -> None:
        self.objects = objects or {}
        self.gets: list[str] = []
        self.during_get: Any = None

    async def get(self, resource: resources.Resource, name: str, namespace: str | None = None) -> Obj | None:
        self.gets.append(f"{resource.plural}/{name}")
        await asyncio.sleep(0)
        if self.during_get is not None:
            self.during_get()
        return self.objects.get(name)


def version(found: Mapping[str, Any] | None) -> str | None:
    return found["metadata"]["resourceVersion"] if found is not None else None


def children_cache() -> WatchCache:
    return WatchCache(frozenset((r.group, r.plural) for r in CHILDREN))


async def test_what_an_event_showed_is_read_without_a_get_and_without_managed_fields() -> None:
    cache, api = children_cache(), Api()
    cache.seen(MACHINES, obj("m", "1", managedFields=[{"manager": "x"}]))
    cache.seen(MACHINES, obj("m", "2"))
    reads = cache.reader(api)
    found = await reads.get(MACHINES, "m", "ns")
    assert version(found) == "2"
    cache.seen(MACHINES, obj("m", "3", managedFields=[{"manager": "x"}]))
    found = await reads.get(MACHINES, "m", "ns")
    assert found is not None
    assert "managedFields" not in found["metadata"]
    assert await reads.get(MACHINES, "m", "other") is None  # another namespace: asked for
    assert api.gets == ["machines/m"]


async def test_a_deleted_object_is_forgotten_and_asked_for_again() -> None:
    cache, api = children_cache(), Api({"m": obj("m", "9")})
    cache.seen(MACHINES, obj("m", "1"))
    cache.seen(MACHINES, obj("m", "2"), deleted=True)
    assert len(cache) == 0
    found = await cache.reader(api).get(MACHINES, "m", "ns")
    assert version(found) == "9"
    assert api.gets == ["machines/m"]


async def test_not_found_is_kept_for_children_only_until_their_creation_shows() -> None:
    cache, api = children_cache(), Api()
    reads = cache.reader(api)
    assert await reads.get(LIBVIRT_VMS, "vm", "ns") is None
    assert await reads.get(LIBVIRT_VMS, "vm", "ns") is None
    assert await reads.get(MACHINES, "m", "ns") is None
    assert await reads.get(MACHINES, "m", "ns") is None
    assert api.gets == ["libvirtvms/vm", "machines/m", "machines/m"]
    cache.seen(LIBVIRT_VMS, obj("vm", "1"))
    assert await reads.get(LIBVIRT_VMS, "vm", "ns") == obj("vm", "1")


async def test_an_object_found_by_a_get_is_not_kept() -> None:
    """Only events keep an entry current: an object no watch shows (another shard's) is read afresh."""
    cache, api = children_cache(), Api({"vm": obj("vm", "1")})
    reads = cache.reader(api)
    await reads.get(LIBVIRT_VMS, "vm", "ns")
    api.objects["vm"] = obj("vm", "2")
    found = await reads.get(LIBVIRT_VMS, "vm", "ns")
    assert version(found) == "2"


async def test_an_event_during_a_get_wins_over_its_not_found() -> None:
    cache, api = children_cache(), Api()
    api.during_get = lambda: cache.seen(kinds.LIBVIRT_VM.resource, obj("vm", "1"))
    assert await cache.reader(api).get(LIBVIRT_VMS, "vm", "ns") is None
    api.during_get = None
    assert await cache.reader(api).get(LIBVIRT_VMS, "vm", "ns") == obj("vm", "1")
    assert api.gets == ["libvirtvms/vm"]


async def test_a_deletion_during_a_get_keeps_nothing() -> None:
    cache, api = children_cache(), Api()
    cache.seen(LIBVIRT_VMS, obj("vm", "1"))
    cache.seen(LIBVIRT_VMS, obj("vm", "2"), deleted=True)

    def created_and_deleted() -> None:
        cache.seen(LIBVIRT_VMS, obj("vm", "3"))
        cache.seen(LIBVIRT_VMS, obj("vm", "4"), deleted=True)

    api.during_get = created_and_deleted
    assert await cache.reader(api).get(LIBVIRT_VMS, "vm", "ns") is None
    api.during_get = None
    api.objects["vm"] = obj("vm", "5")
    found = await cache.reader(api).get(LIBVIRT_VMS, "vm", "ns")
    assert version(found) == "5"


async def test_a_child_just_created_is_read_as_created_until_its_events_come() -> None:
    cache, api = children_cache(), Api()
    reads = cache.reader(api)
    assert await reads.get(LIBVIRT_VMS, "vm", "ns") is None  # "not found" kept: not created yet
    cache.created(LIBVIRT_VMS, obj("vm", "1", managedFields=[{"manager": "x"}]))
    assert await reads.get(LIBVIRT_VMS, "vm", "ns") == obj("vm", "1")
    cache.seen(LIBVIRT_VMS, obj("vm", "2"))
    assert version(await reads.get(LIBVIRT_VMS, "vm", "ns")) == "2"
    assert api.gets == ["libvirtvms/vm"]


async def test_a_creation_answered_after_its_events_does_not_replace_them() -> None:
    cache = children_cache()
    cache.seen(LIBVIRT_VMS, obj("vm", "2"))
    cache.created(LIBVIRT_VMS, obj("vm", "1"))
    assert version(await cache.reader(Api()).get(LIBVIRT_VMS, "vm", "ns")) == "2"


async def test_objects_are_kept_as_compact_text_and_each_read_is_a_fresh_copy() -> None:
    """Parsed, an object takes four to five times its JSON text: the cache keeps the text."""
    conditions = [{"type": f"Step{i}", "status": "True", "reason": "Done", "message": ""} for i in range(12)]
    machines = [obj(f"m{i}", "1", labels={"a": "b"}, status={"conditions": conditions}) for i in range(200)]
    texts = [json.dumps(m, separators=(",", ":")) for m in machines]
    cache = children_cache()
    tracemalloc.start()
    try:
        for text in texts:  # each as a watch event brings it: parsed, then left to the cache
            cache.seen(MACHINES, json.loads(text))
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 1.5 * sum(len(text) for text in texts)
    reads = cache.reader(Api())
    found = await reads.get(MACHINES, "m0", "ns")
    assert found == machines[0]
    assert found is not None
    found["metadata"]["name"] = "changed by a caller"
    assert await reads.get(MACHINES, "m0", "ns") == machines[0]


async def test_the_answer_to_an_own_write_is_read_until_an_event_catches_up_with_it() -> None:
    """A reconcile woken while the watch lags behind the glue's own writes reads what it wrote, not the
    object from before (which it would write again)."""
    cache, api = children_cache(), Api()
    reads = cache.reader(api)
    cache.seen(MACHINES, obj("m", "5"))
    cache.written(MACHINES, obj("m", "7", managedFields=[{"manager": "x"}]))
    assert await reads.get(MACHINES, "m", "ns") == obj("m", "7")
    cache.seen(MACHINES, obj("m", "6"))  # the lagging watch's older news
    assert version(await reads.get(MACHINES, "m", "ns")) == "7"
    cache.seen(MACHINES, obj("m", "8"))
    assert version(await reads.get(MACHINES, "m", "ns")) == "8"
    cache.seen(MACHINES, obj("m", "9"))
    assert version(await reads.get(MACHINES, "m", "ns")) == "9"
    assert api.gets == []


async def test_an_own_write_answered_after_newer_events_does_not_replace_them() -> None:
    cache = children_cache()
    cache.seen(MACHINES, obj("m", "8"))
    cache.written(MACHINES, obj("m", "7"))
    assert version(await cache.reader(Api()).get(MACHINES, "m", "ns")) == "8"


async def test_an_own_write_is_kept_only_for_objects_events_keep_here() -> None:
    """An object no event has shown (another shard's) is read from the API server, as before the write."""
    cache, api = children_cache(), Api({"m": obj("m", "9")})
    cache.written(MACHINES, obj("m", "7"))
    assert version(await cache.reader(api).get(MACHINES, "m", "ns")) == "9"
    assert api.gets == ["machines/m"]


async def test_a_deletion_forgets_an_own_write() -> None:
    cache, api = children_cache(), Api()
    cache.seen(MACHINES, obj("m", "5"))
    cache.written(MACHINES, obj("m", "7"))
    cache.seen(MACHINES, obj("m", "6"), deleted=True)
    assert await cache.reader(api).get(MACHINES, "m", "ns") is None
    cache.seen(MACHINES, obj("m", "3"))  # a new object of that name: its own versions
    assert version(await cache.reader(api).get(MACHINES, "m", "ns")) == "3"
