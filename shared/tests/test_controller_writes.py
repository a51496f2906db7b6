"""The engine's API client: each write's answer goes to the watch cache, so its own event is no news."""

from __future__ import annotations

from typing import Any, cast

from capfleet import resources
from capfleet.controller.caches import WatchCache
from capfleet.controller.writes import RecordingKube
from capfleet.kube import Kube

THINGS = resources.Resource("example.capfleet.dev", "v1", "things", "Thing")


class Api:
    field_manager = "capfleet-test"

    def __init__(self) -> None:
        self.version = 1

    def answer(self, name: str) -> dict[str, Any]:
        self.version += 1
        return {
            "kind": "Thing",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(self.version)},
        }

    async def patch(self, resource: Any, name: str, patch: Any, namespace: Any = None, **_: Any) -> Any:
        return self.answer(name)

    async def patch_status(self, resource: Any, name: str, status: Any, namespace: Any = None) -> Any:
        return self.answer(name)

    async def create_or_get(self, resource: Any, body: Any, namespace: Any = None) -> Any:
        return self.answer(body["metadata"]["name"]), True


def seen_version(version: int) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(version)}}


async def test_the_echo_of_each_write_is_no_news_and_someone_elses_change_is() -> None:
    cache, api = WatchCache(), Api()
    recording = RecordingKube(cast(Kube, api), cache)
    assert recording.unrecorded is cast(Kube, api)
    assert cache.seen(THINGS, seen_version(1)) is True
    await recording.patch(THINGS, "a", {"metadata": {"annotations": {"x": "y"}}}, "ns")
    assert cache.seen(THINGS, seen_version(2)) is False, "the patch's own event"
    await recording.patch_status(THINGS, "a", {"phase": "Ready"}, "ns")
    assert cache.seen(THINGS, seen_version(3)) is False, "the status write's own event"
    assert cache.seen(THINGS, seen_version(4)) is True, "a change made by someone else"


async def test_a_created_child_is_read_from_the_cache_before_its_first_event() -> None:
    cache, api = WatchCache(frozenset({(THINGS.group, THINGS.plural)})), Api()
    recording = RecordingKube(cast(Kube, api), cache)
    await recording.create_or_get(THINGS, {"metadata": {"name": "child"}}, "ns")
    found = await cache.reader(cast(Kube, api)).get(THINGS, "child", "ns")
    assert found is not None
    assert found["metadata"]["name"] == "child"
