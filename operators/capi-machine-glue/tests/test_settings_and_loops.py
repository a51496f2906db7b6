"""The glue's settings keep their variable names, its context comes from memo, kopf keeps no record on
its objects, and its loops and deletions back off by the fleet's one retry policy."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import kopf
import pytest

from capfleet import errors, events, kube, reconciling, runtime
from capi_machine_glue import handlers, loops
from capi_machine_glue.cache import CachedReads, Reads, WatchCache
from capi_machine_glue.contexts import CACHE_KEY, WAKEUPS_KEY, Context
from capi_machine_glue.machines import ChildrenRemaining
from capi_machine_glue.settings import GlueSettings
from capi_machine_glue.wakeups import HYBRID_MACHINE, Key, Wakeups, sleep_until_woken

KEY = Key(HYBRID_MACHINE, "ns", "m")


def test_settings_keep_their_variable_names() -> None:
    assert GlueSettings.load({}) == GlueSettings(resync_seconds=60.0, deletion_poll_seconds=2.0)
    loaded = GlueSettings.load(
        {"CAPFLEET_GLUE_RESYNC_SECONDS": "600", "CAPFLEET_GLUE_DELETION_POLL_SECONDS": "0.5"}
    )
    assert loaded == GlueSettings(resync_seconds=600.0, deletion_poll_seconds=0.5)
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


def test_a_failed_reconcile_is_retried_by_its_errors_policy() -> None:
    waiting = errors.Waiting("later")
    assert loops.as_capfleet_error(waiting, KEY) == (waiting, "retry")
    invalid = errors.InvalidSpec("never")
    assert loops.as_capfleet_error(invalid, KEY) == (invalid, "permanent")
    api, result = loops.as_capfleet_error(kube.KubeError(500, "InternalError", "etcd"), KEY)
    assert result == "error"
    assert isinstance(api, errors.BackendUnavailable)
    bug, result = loops.as_capfleet_error(KeyError("x"), KEY)
    assert result == "error"
    assert bug.delay(0) == errors.BackendUnavailable("x").delay(0)


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
    ctx = Context(client, None, GlueSettings(), Wakeups(), WatchCache())  # type: ignore[arg-type]
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
