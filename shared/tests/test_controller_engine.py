"""The engine's decisions: the finalizer around reconcile and finalize, retries by the error's backoff,
its own writes passed over, children enqueueing their owners, timers reading from the API server."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import pytest

from capfleet import errors, kube, resources
from capfleet.controller.caches import Reads
from capfleet.controller.engine import (
    DONE,
    Controller,
    Engine,
    Key,
    Result,
    TimedWait,
    Watch,
    as_capfleet_error,
    owners,
    run_workers,
)

THINGS = resources.Resource("example.capfleet.dev", "v1", "things", "Thing")
PARTS = resources.Resource("example.capfleet.dev", "v1", "parts", "Part")
FINALIZER = "example.capfleet.dev/finalizer"
KEY = Key("ns", "a")


class Api:
    """An API server of one namespace: objects by (plural, name), resourceVersions counted up."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.gets: list[str] = []

    def put(self, resource: resources.Resource, name: str, **meta: Any) -> dict[str, Any]:
        self.version += 1
        body = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(self.version), **meta}}
        self.objects[(resource.plural, name)] = body
        return copy.deepcopy(body)

    async def get(self, resource: resources.Resource, name: str, namespace: str | None = None) -> Any:
        self.gets.append(name)
        found = self.objects.get((resource.plural, name))
        return copy.deepcopy(found) if found is not None else None

    async def patch(
        self, resource: resources.Resource, name: str, patch: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        body = self.objects[(resource.plural, name)]
        meta = dict(patch["metadata"])
        current = body["metadata"]["resourceVersion"]
        if meta.pop("resourceVersion", current) != current:
            raise AssertionError("a stale write")
        body["metadata"].update(meta)
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
            del self.objects[(resource.plural, name)]
        return copy.deepcopy(body)

    async def json_patch(
        self,
        resource: resources.Resource,
        name: str,
        operations: list[dict[str, Any]],
        namespace: str | None = None,
    ) -> Any:
        body = self.objects[(resource.plural, name)]
        finalizers = body["metadata"].setdefault("finalizers", [])
        for op in operations:
            index = int(op["path"].rsplit("/", 1)[1])
            if op["op"] == "test" and (index >= len(finalizers) or finalizers[index] != op["value"]):
                raise kube.Invalid(422, "Invalid", "the test failed")
            if op["op"] == "remove":
                del finalizers[index]
        return await self.patch(resource, name, {"metadata": {}})

    def touch(self, name: str) -> None:
        """Someone else's write: a new resourceVersion, and another finalizer put first."""
        body = self.objects[("things", name)]
        body["metadata"]["finalizers"].insert(0, "someone.else/first")
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)


class Calls:
    def __init__(self) -> None:
        self.reconciled: list[list[str]] = []
        self.finalized = 0
        self.finalize_result = DONE
        self.fail_with: Exception | None = None

    async def reconcile(self, ctx: Reads, obj: Mapping[str, Any]) -> Result:
        self.reconciled.append(list(obj["metadata"].get("finalizers") or []))
        if self.fail_with is not None:
            raise self.fail_with
        return Result(requeue_after=30)

    async def finalize(self, ctx: Reads, obj: Mapping[str, Any]) -> Result:
        self.finalized += 1
        return self.finalize_result


def engine_of(calls: Calls, **extra: Any) -> Engine[Reads]:
    controller: Controller[Reads] = Controller(THINGS, FINALIZER, calls.reconcile, calls.finalize, **extra)
    return Engine(controller)


async def process(engine: Engine[Reads], api: Api, key: Key = KEY) -> None:
    await engine.process(key, lambda reads: reads, api)  # type: ignore[arg-type]


def due(engine: Engine[Reads], key: Key = KEY) -> float | None:
    return engine.queue.schedule._due.get(key)


async def test_the_finalizer_is_added_before_the_first_reconcile_and_the_result_requeues() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    engine.seen(THINGS, "ADDED", api.put(THINGS, "a"))
    assert engine.queue.schedule.take() == KEY
    await process(engine, api)
    engine.queue.done(KEY)
    assert calls.reconciled == [[FINALIZER]]
    assert api.objects[("things", "a")]["metadata"]["finalizers"] == [FINALIZER]
    assert due(engine) is not None, "requeued after the result's 30 s"


async def test_no_finalizer_for_an_object_that_will_hold_nothing_outside() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls, needs_finalizer=lambda obj: False)
    engine.seen(THINGS, "ADDED", api.put(THINGS, "a"))
    await process(engine, api)
    assert calls.reconciled == [[]]


async def test_a_deletion_keeps_the_finalizer_until_finalize_has_nothing_left_to_wait_for() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    api.put(THINGS, "a", finalizers=[FINALIZER, "someone.else/keeps"], deletionTimestamp="now")
    calls.finalize_result = Result(requeue_after=5)
    await process(engine, api)
    assert api.objects[("things", "a")]["metadata"]["finalizers"] == [FINALIZER, "someone.else/keeps"]
    calls.finalize_result = DONE
    await process(engine, api)
    assert api.objects[("things", "a")]["metadata"]["finalizers"] == ["someone.else/keeps"]
    await process(engine, api)
    assert calls.finalized == 2, "without its finalizer, nothing more is finalized"
    assert calls.reconciled == [], "an object being deleted is never reconciled"


@pytest.mark.parametrize("helps", [False, True])
async def test_a_deletion_without_the_finalizer_is_finalized_only_by_a_controller_that_helps(
    helps: bool,
) -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls, needs_finalizer=lambda obj: False, helps_deletion=helps)
    api.put(THINGS, "a", finalizers=["someone.else/keeps"], deletionTimestamp="now")
    await process(engine, api)
    assert calls.finalized == int(helps)
    assert api.objects[("things", "a")]["metadata"]["finalizers"] == ["someone.else/keeps"]
    assert calls.reconciled == []


async def test_the_finalizer_comes_off_though_finalize_wrote_to_the_object_and_the_list_moved() -> None:
    api, calls = Api(), Calls()
    api.put(THINGS, "a", finalizers=[FINALIZER], deletionTimestamp="now")
    finalize = calls.finalize

    async def writing(ctx: Reads, obj: Mapping[str, Any]) -> Result:
        api.touch("a")  # a let-go mark, a status: the resourceVersion read before is stale, the index moved
        return await finalize(ctx, obj)

    calls.finalize = writing  # type: ignore[method-assign]
    engine = engine_of(calls)
    await process(engine, api)
    assert api.objects[("things", "a")]["metadata"]["finalizers"] == ["someone.else/first"]
    assert calls.finalized == 1, "finalize is not run again to take the finalizer off"
    assert KEY not in engine._failures


async def test_failures_back_off_by_the_errors_own_delay_and_success_resets_the_count() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    api.put(THINGS, "a", finalizers=[FINALIZER])
    calls.fail_with = errors.InvalidSpec("bad CIDR")
    await process(engine, api)
    assert engine._failures[KEY] == 1
    calls.fail_with = RuntimeError("a bug")
    await process(engine, api)
    assert engine._failures[KEY] == 2
    calls.fail_with = None
    await process(engine, api)
    assert KEY not in engine._failures


async def test_the_event_of_its_own_write_does_not_enqueue_but_any_other_change_does() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    engine.seen(THINGS, "ADDED", api.put(THINGS, "a"))
    assert engine.queue.schedule.take() == KEY
    await process(engine, api)  # adds the finalizer: a write of its own
    engine.queue.done(KEY)
    engine.queue.forget(KEY)
    engine.seen(THINGS, "MODIFIED", await api.get(THINGS, "a"))
    assert len(engine.queue.schedule) == 0, "its own write is not news"
    changed = await api.patch(THINGS, "a", {"metadata": {"labels": {"x": "y"}}})
    engine.seen(THINGS, "MODIFIED", changed)
    assert engine.queue.schedule.take() == KEY


@pytest.mark.parametrize("echoes", [False, True])
async def test_the_echo_of_an_own_write_of_a_watched_kind_concerns_only_the_watches_asking(
    echoes: bool,
) -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls, watches=[Watch(PARTS, owners("Thing"), echoes=echoes)])
    engine.seen(PARTS, "ADDED", api.put(PARTS, "p", ownerReferences=[{"kind": "Thing", "name": "a"}]))
    assert engine.queue.schedule.take() == KEY
    engine.queue.done(KEY)
    written = await api.patch(PARTS, "p", {"metadata": {"labels": {"x": "y"}}})  # the process's own write
    engine.cache.written(PARTS, written)
    engine.seen(PARTS, "MODIFIED", written)
    assert (engine.queue.schedule.take() == KEY) is echoes


async def test_a_lagging_event_older_than_its_own_write_still_enqueues() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    engine.seen(THINGS, "ADDED", api.put(THINGS, "a"))
    assert engine.queue.schedule.take() == KEY
    engine.queue.done(KEY)
    changed_by_someone = await api.patch(THINGS, "a", {"metadata": {"labels": {"x": "y"}}})
    engine.cache.written(THINGS, await api.patch(THINGS, "a", {"metadata": {"labels": {"z": "w"}}}))
    engine.seen(THINGS, "MODIFIED", changed_by_someone)
    assert engine.queue.schedule.take() == KEY


async def test_a_childs_event_enqueues_its_owner_and_a_deletion_forgets_the_key() -> None:
    calls = Calls()
    engine = engine_of(calls, watches=[Watch(PARTS, owners("Thing"))])
    part = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [{"kind": "Thing", "name": "a"}]}}
    engine.seen(PARTS, "MODIFIED", part)
    assert engine.queue.schedule.take() == KEY
    engine.queue.done(KEY)
    engine.queue.add_after(KEY, 60)
    engine.seen(THINGS, "DELETED", {"metadata": {"name": "a", "namespace": "ns"}})
    assert due(engine) is None


@pytest.mark.parametrize("by_event", [True, False])
async def test_an_evented_key_reads_the_watch_cache_and_a_timed_one_the_api_server(by_event: bool) -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    body = api.put(THINGS, "a", finalizers=[FINALIZER])
    engine.cache.seen(THINGS, body)
    if by_event:
        engine.seen(THINGS, "MODIFIED", body)
    await process(engine, api)
    assert api.gets == ([] if by_event else ["a"])
    assert len(calls.reconciled) == 1


def test_a_failed_reconcile_is_retried_by_its_errors_policy() -> None:
    waiting = errors.Waiting("later")
    assert as_capfleet_error(waiting, "Thing", KEY) == (waiting, "retry")
    invalid = errors.InvalidSpec("never")
    assert as_capfleet_error(invalid, "Thing", KEY) == (invalid, "permanent")
    api, result = as_capfleet_error(kube.KubeError(500, "InternalError", "etcd"), "Thing", KEY)
    assert result == "error"
    assert isinstance(api, errors.BackendUnavailable)
    # API answers are retried by what they mean, as for kopf's handlers (runtime.api_error).
    conflict, result = as_capfleet_error(kube.Conflict(409, "Conflict", "changed"), "Thing", KEY)
    assert (result, type(conflict)) == ("retry", errors.Conflict)
    refused, result = as_capfleet_error(kube.KubeError(403, "Forbidden", "no"), "Thing", KEY)
    assert isinstance(refused, errors.BackendRejected)
    bug, result = as_capfleet_error(KeyError("x"), "Thing", KEY)
    assert result == "error"
    assert bug.delay(0) == errors.BackendUnavailable("x").delay(0)


def test_a_groups_event_enqueues_each_member_and_only_them() -> None:
    calls = Calls()
    group_of = lambda obj: (obj["metadata"].get("labels") or {}).get("cluster")  # noqa: E731
    engine = engine_of(
        calls, group=group_of, watches=[Watch(PARTS, groups=lambda obj: [obj["metadata"]["name"]])]
    )
    for name, cluster in [("a", "c1"), ("b", "c1"), ("c", "c2")]:
        engine.seen(
            THINGS, "ADDED", {"metadata": {"name": name, "namespace": "ns", "labels": {"cluster": cluster}}}
        )
    drain = [engine.queue.schedule.take() for _ in range(3)]
    for key in drain:
        assert key is not None
        engine.queue.done(key)
    engine.seen(PARTS, "MODIFIED", {"metadata": {"name": "c1", "namespace": "ns"}})
    assert {engine.queue.schedule.take(), engine.queue.schedule.take()} == {Key("ns", "a"), Key("ns", "b")}
    assert engine.queue.schedule.take() is None
    engine.seen(PARTS, "MODIFIED", {"metadata": {"name": "c1", "namespace": "other"}})
    assert len(engine.queue.schedule) == 0, "groups are per namespace"


async def test_an_object_not_served_is_neither_enqueued_nor_reconciled() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls, serves=lambda obj: "mine" in (obj["metadata"].get("labels") or {}))
    engine.seen(THINGS, "ADDED", api.put(THINGS, "a"))
    assert len(engine.queue.schedule) == 0
    await process(engine, api)
    assert calls.reconciled == []


async def test_a_timed_wait_comes_back_unjittered_and_reads_the_cache() -> None:
    api, calls = Api(), Calls()
    engine = engine_of(calls)
    body = api.put(THINGS, "a", finalizers=[FINALIZER])
    engine.cache.seen(THINGS, body)
    calls.fail_with = TimedWait("a grace", reason="AwaitingReport")
    await process(engine, api)
    assert KEY in engine._evented, "the retry reads the watch cache"
    first = due(engine)
    assert first is not None
    assert first - asyncio.get_running_loop().time() == pytest.approx(TimedWait("x").delay(0), abs=0.05)
    engine.queue.forget(KEY)
    await process(engine, api)
    assert api.gets == ["a"], "only the first, timed, read went to the API server"


async def test_events_wait_the_settle_time_and_a_burst_is_one_key() -> None:
    calls = Calls()
    engine = engine_of(calls, settle_seconds=0.5)
    for version in range(5):
        engine.seen(
            THINGS,
            "MODIFIED",
            {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(version)}},
        )
    assert engine.queue.schedule.take() is None, "not before the settle time"
    assert len(engine.queue.schedule) == 1


async def test_a_watch_may_settle_its_keys_longer_than_the_controllers_own_events() -> None:
    engine = engine_of(Calls(), watches=[Watch(PARTS, owners("Thing"), settle_seconds=2.0)])
    part = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [{"kind": "Thing", "name": "a"}]}}
    engine.seen(PARTS, "ADDED", part)
    assert engine.queue.schedule.take() is None, "a part's event waits its watch's settle time"
    engine.seen(THINGS, "ADDED", {"metadata": {"name": "b", "namespace": "ns"}})
    assert engine.queue.schedule.take() == Key("ns", "b"), "the kind's own event does not wait"


async def test_a_cancellation_from_within_a_reconcile_fails_that_reconcile_and_not_the_workers() -> None:
    api, calls = Api(), Calls()
    api.put(THINGS, "a", finalizers=[FINALIZER])
    api.put(THINGS, "b", finalizers=[FINALIZER])
    reconciled: list[str] = []
    b_done = asyncio.Event()

    async def reconcile(ctx: Reads, obj: Mapping[str, Any]) -> Result:
        name = obj["metadata"]["name"]
        reconciled.append(name)
        if name == "b":
            b_done.set()
        if name == "a":
            cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            cancelled.cancel()  # a shared future another caller cancelled
            await cancelled
        return DONE

    controller: Controller[Reads] = Controller(THINGS, FINALIZER, reconcile, calls.finalize, workers=1)
    engine = Engine(controller)
    running = asyncio.ensure_future(run_workers(engine, lambda reads: reads, api))  # type: ignore[arg-type]
    engine.queue.add(KEY)
    engine.queue.add(Key("ns", "b"))
    try:
        await asyncio.wait_for(b_done.wait(), 5)
        assert reconciled[:2] == ["a", "b"], "the one worker went on after a's cancelled reconcile"
        assert due(engine) is not None, "a is retried"
    finally:
        engine.queue.close()
        await asyncio.wait_for(running, 5)
