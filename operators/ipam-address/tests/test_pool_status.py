"""Unit tests of a pool's status task: a burst of allocations is written a few times, not once per claim,
and a change after a quiet spell is written promptly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from capfleet.resources import Resource
from ipam_address import pool_status
from ipam_address.allocator import Allocator
from ipam_address.pools import PoolKey

POOL = {
    "apiVersion": "ipam.capfleet.dev/v1alpha1",
    "kind": "HybridIPPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 1},
    "spec": {"addresses": ["10.1.0.0/16"], "prefix": 16},
}


class StatusWrites:
    def __init__(self) -> None:
        self.used: list[tuple[float, int]] = []
        self.written = asyncio.Event()

    async def patch_status(
        self, resource: Resource, name: str, status: dict[str, Any], namespace: str
    ) -> None:
        if "ipAddresses" in status:
            self.used.append((time.monotonic(), status["ipAddresses"]["used"]))
            self.written.set()


def test_a_change_after_a_quiet_spell_waits_only_to_coalesce_one_during_a_burst_waits_for_its_turn() -> None:
    assert pool_status.coalescing_delay(float("inf")) == pool_status.COALESCE_SECONDS
    assert pool_status.coalescing_delay(pool_status.BURST_WRITE_SECONDS + 1) == pool_status.COALESCE_SECONDS
    assert pool_status.coalescing_delay(1.0) == pool_status.BURST_WRITE_SECONDS - 1.0


async def test_a_burst_is_written_at_its_pace_and_the_last_count_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool_status, "COALESCE_SECONDS", 0.02)
    monkeypatch.setattr(pool_status, "BURST_WRITE_SECONDS", 0.3)
    kube, allocator, allocated = StatusWrites(), Allocator(), list[str]()
    key = PoolKey("ns", "HybridIPPool", "p")
    stopped = False
    task = asyncio.create_task(
        pool_status.keep(kube, allocator, POOL, lambda: list(allocated), lambda: stopped)  # type: ignore[arg-type]
    )
    started = time.monotonic()
    for i in range(100):  # one allocation every 10 ms for a second
        allocated.append(f"10.1.{i // 250}.{i % 250 + 1}")
        allocator.changed(key)
        await asyncio.sleep(0.01)
    burst = time.monotonic() - started
    await asyncio.sleep(0.5)
    writes_in_burst = len(kube.used)
    assert kube.used[-1][1] == 100
    # At most one write per BURST_WRITE_SECONDS (plus the first, at once); the 0.5 s pace wrote ~40.
    assert writes_in_burst <= burst / 0.3 + 2

    quiet_change = time.monotonic()
    kube.written.clear()
    allocated.append("10.1.9.9")
    allocator.changed(key)
    await asyncio.wait_for(kube.written.wait(), 5)
    assert kube.used[-1][1] == 101
    assert kube.used[-1][0] - quiet_change < 0.25  # not held back by the burst's pace
    stopped = True
    allocator.changed(key)
    await asyncio.wait_for(task, 5)
