"""Blocking backends run in lanes of their own: a lane full of calls that hang leaves the event loop's
default executor, and with it every API request, free."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from capfleet import netbox, resources
from capfleet.kube import Kube
from capfleet.lanes import Lane

caller = contextvars.ContextVar("caller", default="nobody")


async def test_a_call_runs_in_one_of_the_lanes_named_threads_with_the_callers_context() -> None:
    lane = Lane("sample", threads=2)
    caller.set("reconcile of vm-1")

    def where() -> tuple[str, str]:
        return threading.current_thread().name, caller.get()

    thread, seen = await lane.run(where)

    assert thread.startswith("capfleet-sample")
    assert seen == "reconcile of vm-1"


async def test_a_lane_runs_at_most_its_threads_at_once_and_queues_the_rest() -> None:
    lane = Lane("bounded", threads=3)
    release = threading.Event()
    full = threading.Event()
    running, most = 0, 0
    count = threading.Lock()

    def hold() -> None:
        nonlocal running, most
        with count:
            running += 1
            most = max(most, running)
            if running == 3:
                full.set()
        release.wait(10)
        with count:
            running -= 1

    calls = [asyncio.ensure_future(lane.run(hold)) for _ in range(10)]
    assert await asyncio.to_thread(full.wait, 5)
    await asyncio.sleep(0.2)  # time for a fourth thread to start, were the lane not bounded
    assert most == 3
    release.set()
    await asyncio.gather(*calls)
    assert most == 3


async def test_a_lane_full_of_hanging_calls_leaves_the_default_executor_free() -> None:
    lane = Lane("hanging", threads=8)
    release = threading.Event()
    hung = [asyncio.ensure_future(lane.run(release.wait, 30)) for _ in range(64)]
    try:
        await asyncio.sleep(0.1)
        answer = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, lambda: 42), 5)
        assert answer == 42
        assert not any(call.done() for call in hung)
    finally:
        release.set()
        await asyncio.gather(*hung)


def test_a_lane_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        Lane("empty", threads=0)


@pytest.mark.integration
async def test_api_requests_go_through_while_netbox_calls_hang_by_the_hundred(
    kube: Kube, namespace: str
) -> None:
    """The stall `make bench-fleet N=500` found: pynetbox calls waiting on a slow NetBox filled the
    default executor that aiohttp looks up `.netrc` and proxies in before every API request (the client
    opens its session with `trust_env`), and netbox-device's requests timed out without being sent."""
    release = threading.Event()
    hung = [asyncio.ensure_future(netbox.call("hang", release.wait, 60)) for _ in range(200)]
    try:
        await asyncio.sleep(0.1)
        reads = [kube.get(resources.NAMESPACES, namespace) for _ in range(50)]
        found = await asyncio.wait_for(asyncio.gather(*reads), 20)
        assert all(obj is not None and obj["metadata"]["name"] == namespace for obj in found)
        assert not any(call.done() for call in hung)
    finally:
        release.set()
        await asyncio.gather(*hung)
