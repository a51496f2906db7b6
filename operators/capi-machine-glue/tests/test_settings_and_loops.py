"""The glue's settings keep their variable names, its context comes from memo, kopf keeps no record on
its objects, and its loops and deletions back off by the fleet's one retry policy."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable
from typing import Any

import kopf
import pytest

from capfleet import errors, events, kube, reconciling, runtime
from capfleet.controller.caches import CachedReads, Reads, WatchCache
from capi_machine_glue import handlers, loops
from capi_machine_glue.contexts import CACHE_KEY, WAKEUPS_KEY, Context
from capi_machine_glue.deletions import ChildrenRemaining
from capi_machine_glue.settings import GlueSettings
from capi_machine_glue.wakeups import HYBRID_MACHINE, Key, Wakeups, sleep_until_woken

KEY = Key(HYBRID_MACHINE, "ns", "m")


def test_settings_keep_their_variable_names() -> None:
    assert GlueSettings.load({}) == GlueSettings(
        resync_seconds=600.0, settle_seconds=0.5, deletion_poll_seconds=2.0
    )
    loaded = GlueSettings.load(
        {
            "CAPFLEET_GLUE_RESYNC_SECONDS": "600",
            "CAPFLEET_GLUE_SETTLE_SECONDS": "0",
            "CAPFLEET_GLUE_DELETION_POLL_SECONDS": "0.5",
        }
    )
    assert loaded == GlueSettings(resync_seconds=600.0, settle_seconds=0.0, deletion_poll_seconds=0.5)
    with pytest.raises(ValueError, match="CAPFLEET_GLUE_RESYNC_SECONDS"):
        GlueSettings.load({"CAPFLEET_GLUE_RESYNC_SECONDS": "soon"})


def test_the_context_comes_from_what_startup_put_in_memo() -> None:
    client = kube.Kube.__new__(kube.Kube)
    memo: dict[str, Any] = {
        reconciling.KUBE_KEY: client,
        reconciling.EVENTS_KEY: events.Recorder(client),
        reconciling.SETTINGS_KEY: GlueSettings(resync_seconds=5.0),
    }
    with pytest.raises(RuntimeError, match="no Wakeups"):
        Context.from_memo(memo)
    memo[WAKEUPS_KEY] = Wakeups()
    with pytest.raises(RuntimeError, match="no WatchCache"):
        Context.from_memo(memo)
    memo[CACHE_KEY] = WatchCache()
    ctx = Context.from_memo(memo)
    assert ctx.settings.resync_seconds == 5.0
    assert ctx.wakeups is memo[WAKEUPS_KEY]
    assert ctx.cache is memo[CACHE_KEY]


def test_deletion_polls_at_the_setting_then_backs_off() -> None:
    remaining = ChildrenRemaining("waiting", poll_seconds=0.5)
    assert [remaining.delay(retry) for retry in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert 0.5 <= (errors.to_kopf(remaining, 1).delay or 0) <= 1.0  # type: ignore[union-attr]


class Stop:
    """Stops the loop after `rounds` sleeps."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def __bool__(self) -> bool:
        return self.rounds <= 0

    def wait(self, timeout: float | None = None) -> Awaitable[Any]:
        return asyncio.Event().wait()


async def test_the_loop_sleeps_for_the_errors_backoff_and_the_resync_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = Context(None, None, GlueSettings(resync_seconds=60.0), Wakeups(), WatchCache())  # type: ignore[arg-type]
    stop = Stop(4)
    slept: list[float] = []

    async def sleep(event: asyncio.Event, stopped: Any, seconds: float) -> bool:
        slept.append(seconds)
        stop.rounds -= 1
        return False

    outcomes: list[Exception | None] = [
        errors.Waiting("a"),
        errors.Waiting("b"),
        errors.InvalidSpec("c"),
        None,
    ]

    async def reconcile(reads: Reads) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(loops, "sleep_until_woken", sleep)
    await loops.run(ctx, KEY, reconcile, stop)
    backoff, resync = slept[:2], slept[2:]
    assert 5.0 <= backoff[0] <= 10.0, backoff  # 10 s, jittered
    assert 10.0 <= backoff[1] <= 20.0, backoff  # 20 s, jittered
    assert resync == [60.0, 60.0]
    assert KEY not in ctx.wakeups._events


async def test_a_change_is_read_from_the_watch_cache_and_a_resync_or_retry_from_the_api_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = kube.Kube.__new__(kube.Kube)
    settings = GlueSettings(settle_seconds=0.0)
    ctx = Context(client, None, settings, Wakeups(), WatchCache())  # type: ignore[arg-type]
    woken_by_change = [True, False, True, False]
    stop = Stop(len(woken_by_change))

    async def sleep(event: asyncio.Event, stopped: Any, seconds: float) -> bool:
        stop.rounds -= 1
        return woken_by_change.pop(0)

    sources: list[str] = []

    async def reconcile(reads: Reads) -> None:
        cached = isinstance(reads, CachedReads) and reads.cache is ctx.cache and reads.fallback is client
        sources.append("cache" if cached else "api" if reads is client else "?")
        if len(sources) == 2:
            raise errors.Waiting("a child")  # its retry reads from the API server

    monkeypatch.setattr(loops, "sleep_until_woken", sleep)
    await loops.run(ctx, KEY, reconcile, stop)
    # The first reconcile follows the event that showed the object.
    assert sources == ["cache", "cache", "api", "cache"]


async def test_a_sleeping_loop_keeps_no_failed_reconcile_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure's traceback holds the reconcile's frames and all it read: not kept while the loop sleeps."""
    ctx = Context(None, None, GlueSettings(settle_seconds=0.0), Wakeups(), WatchCache())  # type: ignore[arg-type]
    stop = Stop(2)
    failures: list[weakref.ref[Exception]] = []

    class Read:
        """What a reconcile read, held by its frame."""

    held: list[weakref.ref[Read]] = []
    alive_while_sleeping: list[bool] = []

    async def sleep(event: asyncio.Event, stopped: Any, seconds: float) -> bool:
        gc.collect()
        alive = [ref() for ref in failures] + [ref() for ref in held]
        alive_while_sleeping.append(any(found is not None for found in alive))
        stop.rounds -= 1
        return True

    async def reconcile(reads: Reads) -> None:
        read = Read()
        held.append(weakref.ref(read))
        if not failures:
            failure = errors.Waiting("a child")
            failures.append(weakref.ref(failure))
            raise failure

    monkeypatch.setattr(loops, "sleep_until_woken", sleep)
    await loops.run(ctx, KEY, reconcile, stop)
    assert alive_while_sleeping == [False, False]


async def test_the_retry_of_a_timed_wait_comes_unjittered_and_reads_from_the_watch_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = kube.Kube.__new__(kube.Kube)
    ctx = Context(client, None, GlueSettings(settle_seconds=0.0), Wakeups(), WatchCache())  # type: ignore[arg-type]
    stop = Stop(3)
    slept: list[float] = []

    async def timer_ran_out(event: asyncio.Event, stopped: Any, seconds: float) -> bool:
        slept.append(seconds)
        stop.rounds -= 1
        return False

    outcomes: list[Exception] = [loops.TimedWait("a grace"), errors.Waiting("a child"), errors.Waiting("b")]
    sources: list[str] = []

    async def reconcile(reads: Reads) -> None:
        sources.append("cache" if isinstance(reads, CachedReads) else "api")
        raise outcomes.pop(0)

    monkeypatch.setattr(loops, "sleep_until_woken", timer_ran_out)
    await loops.run(ctx, KEY, reconcile, stop)
    assert sources == ["cache", "cache", "api"]
    assert slept[0] == 10.0, "the timed wait's own delay"
    assert 10.0 <= slept[1] <= 20.0, slept  # 20 s, jittered


class StopOnEvent:
    """Stops the loop when its event is set, as kopf's `stopped` does."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float | None = None) -> Awaitable[Any]:
        return self.event.wait()


async def test_changes_that_follow_a_wake_up_within_the_settle_time_cost_one_reconcile() -> None:
    settings = GlueSettings(settle_seconds=0.3, resync_seconds=600.0)
    ctx = Context(None, None, settings, Wakeups(), WatchCache())  # type: ignore[arg-type]
    clock = asyncio.get_running_loop().time
    reconciled: asyncio.Queue[float] = asyncio.Queue()

    async def reconcile(reads: Reads) -> None:
        reconciled.put_nowait(clock())

    stop = StopOnEvent()
    loop = asyncio.create_task(loops.run(ctx, KEY, reconcile, stop))
    await asyncio.wait_for(reconciled.get(), 5.0)  # the first reconcile, on the event that showed it
    first_change = clock()
    for _ in range(3):  # a child created, its finalizer, its first status
        assert ctx.wakeups.poke(KEY)
        await asyncio.sleep(0.05)
    second = await asyncio.wait_for(reconciled.get(), 5.0)
    assert second - first_change >= 0.3, "the loop reconciled before the burst settled"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reconciled.get(), 0.6)  # three changes, one reconcile
    stop.event.set()
    await asyncio.wait_for(loop, 5.0)
    assert KEY not in ctx.wakeups._events


async def test_a_deletion_looks_again_when_a_child_changes_and_hands_a_long_wait_to_kopf() -> None:
    ctx = Context(None, None, GlueSettings(), Wakeups(), WatchCache())  # type: ignore[arg-type]
    remaining = ["BaremetalInstance m", "IPAddressClaim m-eth0-0"]
    attempts: asyncio.Queue[int] = asyncio.Queue()

    async def attempt(_by_wakeup: bool) -> None:
        attempts.put_nowait(len(remaining))
        if remaining:
            raise ChildrenRemaining(f"waiting for {remaining[0]}", poll_seconds=600.0)

    deletion = asyncio.create_task(loops.waiting_out(ctx, KEY, attempt, patience=3600.0))
    assert await asyncio.wait_for(attempts.get(), 5.0) == 2
    for left in (1, 0):  # each child's deletion seen by the watch: no 600 s poll is waited out
        remaining.pop(0)
        assert ctx.wakeups.poke(KEY)
        assert await asyncio.wait_for(attempts.get(), 5.0) == left
    await asyncio.wait_for(deletion, 5.0)
    assert KEY not in ctx.wakeups._events

    remaining.append("BaremetalInstance m")
    patient = ChildrenRemaining("waiting for BaremetalInstance m", poll_seconds=0.05)

    async def stuck(_by_wakeup: bool) -> None:
        raise patient

    with pytest.raises(ChildrenRemaining) as handed_over:
        await asyncio.wait_for(loops.waiting_out(ctx, KEY, stuck, patience=0.3), 5.0)
    assert handed_over.value is patient
    assert KEY not in ctx.wakeups._events


def test_every_waiter_of_an_object_is_woken_and_leaves_alone() -> None:
    wakeups = Wakeups()
    loop, deletion = wakeups.register(KEY), wakeups.register(KEY)
    wakeups.belongs_to(KEY, "ns", "c1")
    assert wakeups.poke_cluster("ns", "c1") == 1
    assert loop.is_set()
    assert deletion.is_set()
    wakeups.unregister(KEY, loop)  # the loop stops while the deletion still waits
    deletion.clear()
    assert wakeups.poke(KEY)
    assert deletion.is_set()
    wakeups.unregister(KEY, deletion)
    assert not wakeups.poke(KEY)
    assert wakeups.poke_cluster("ns", "c1") == 0


async def test_sleeping_says_whether_a_change_woke_it() -> None:
    event = asyncio.Event()
    assert await sleep_until_woken(event, None, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await sleep_until_woken(event, None, 60.0) is True


def test_kopf_writes_no_record_of_what_it_handled_on_the_glues_objects() -> None:
    settings = kopf.OperatorSettings()
    runtime.configure(settings, handlers.IDENTITY, runtime.Options(), handlers.nothing_to_record)
    storage = settings.persistence.diffbase_storage
    machine = {"apiVersion": "v1", "kind": "HybridMachine", "metadata": {"name": "m"}, "spec": {}}
    body = kopf.Body(machine)  # type: ignore[arg-type]
    assert storage.fetch(body=body) == storage.build(body=body), "no change for kopf to handle"
    patch = kopf.Patch()
    given = kopf.Body({**machine, "spec": {"providerID": "capfleet://metal/7"}})  # type: ignore[arg-type]
    storage.store(body=given, patch=patch, essence=storage.build(body=given))
    assert not patch
