"""The deadline watch of instances in flight: when it calls the reconcile, and when it does not (real
timing, with looks of a few milliseconds)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import kopf
from test_attention import instance

from baremetal_provision import deadlines, markers, provisioning

LOOK = 0.01
EXPIRED = {markers.NETWORK_BOOTED: "2020-01-01T00:00:00Z"}


class Stop:
    """Stops the watch when its event is set, as kopf's `stopped` does."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float | None = None) -> Awaitable[Any]:
        return asyncio.wait([asyncio.ensure_future(self.event.wait())], timeout=timeout)


def body(phase: str, **annotations: str) -> dict[str, Any]:
    meta = {"name": "bm", "namespace": "ns", "annotations": annotations}
    return {**instance(meta), "status": {"phase": phase} if phase else {}}


def expired(version: str) -> dict[str, Any]:
    instance = body("Installing", **EXPIRED)
    instance["metadata"]["resourceVersion"] = version
    return instance


async def watching(
    instance: dict[str, Any], outcomes: list[Exception | None]
) -> tuple[Stop, asyncio.Queue[str]]:
    """Start a watch of `instance` whose attends answer `outcomes` in turn (None: done); each attend puts
    the resourceVersion it saw in the queue."""
    stop, attended = Stop(), asyncio.Queue[str]()

    async def attend() -> None:
        attended.put_nowait(instance["metadata"]["resourceVersion"])
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome

    asyncio.get_running_loop().create_task(deadlines.watch(instance, stop, attend, LOOK))
    return stop, attended


async def test_an_expired_instance_is_attended_once_it_was_quiet_for_a_look() -> None:
    instance = expired("1")
    stop, attended = await watching(instance, [])
    assert await asyncio.wait_for(attended.get(), 2.0) == "1"
    stop.event.set()


async def test_an_instance_that_keeps_changing_is_left_to_the_change_handler() -> None:
    instance = expired("1")
    stop, attended = await watching(instance, [])
    for version in range(2, 40):
        instance["metadata"]["resourceVersion"] = str(version)
        await asyncio.sleep(LOOK * 0.6)
        assert attended.empty(), "attended while the object changed at every look"
    assert await asyncio.wait_for(attended.get(), 2.0) == "39"
    stop.event.set()


async def test_an_instance_within_its_deadline_is_not_attended() -> None:
    instance = body("Installing", **{markers.NETWORK_BOOTED: markers.now()})
    assert provisioning.in_flight(instance)
    stop, attended = await watching(instance, [])
    await asyncio.sleep(LOOK * 20)
    assert attended.empty()
    stop.event.set()


async def test_a_refusal_waits_for_a_change_and_a_retry_for_its_delay() -> None:
    instance = expired("1")
    refusal = kopf.PermanentError("InvalidSpec: only an edit helps")
    stop, attended = await watching(instance, [refusal, kopf.TemporaryError("busy", delay=0.3)])
    assert await asyncio.wait_for(attended.get(), 2.0) == "1"
    await asyncio.sleep(LOOK * 20)
    assert attended.empty(), "a refused instance was attended again with nothing changed"
    instance["metadata"]["resourceVersion"] = "2"
    assert await asyncio.wait_for(attended.get(), 2.0) == "2"
    loop = asyncio.get_running_loop()
    retried_at = loop.time()
    assert await asyncio.wait_for(attended.get(), 2.0) == "2"
    assert loop.time() - retried_at >= 0.3, "the retry came before its delay"
    stop.event.set()


async def test_the_watch_ends_when_stopped() -> None:
    stop = Stop()
    stop.event.set()

    async def attend() -> None:
        raise AssertionError("attended after the stop")

    await asyncio.wait_for(deadlines.watch(expired("1"), stop, attend, LOOK), 1.0)


def test_only_instances_between_network_boot_and_the_end_are_in_flight() -> None:
    assert provisioning.in_flight(body("Installing", **EXPIRED))
    assert provisioning.in_flight(body("", **EXPIRED)), "a lost status is rebuilt"
    assert not provisioning.in_flight(body("NetworkBooting"))
    assert not provisioning.in_flight(body("Provisioned", **EXPIRED))
    assert not provisioning.in_flight(body("Failed", **EXPIRED))
