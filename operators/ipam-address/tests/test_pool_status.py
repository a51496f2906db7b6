"""Unit tests of a pool's controller: its counts written only when they change, and its deletion held
while addresses of it are allocated."""

from __future__ import annotations

import pytest
from serving_fakes import NAMESPACE, FakeKube, context, hybridippool

from capfleet import errors
from ipam_address import pool_status


async def test_counts_are_written_when_they_change_and_only_then() -> None:
    kube = FakeKube()
    pool = hybridippool(addresses=["10.1.0.0/29"], prefix=24)
    ctx = context(kube, pool, bound={(NAMESPACE, "c1"): ("10.1.0.3", False)})
    await pool_status.reconcile(ctx, pool)
    [status] = kube.statuses
    assert status["ipAddresses"] == {"total": 6, "used": 1, "free": 5, "outOfRange": 0}
    await pool_status.reconcile(ctx, {**pool, "status": status})
    assert len(kube.statuses) == 1, "nothing changed: nothing written"


async def test_a_pool_in_use_is_not_let_go_and_says_why() -> None:
    kube = FakeKube()
    pool = hybridippool(addresses=["10.1.0.0/29"], prefix=24)
    ctx = context(kube, pool, bound={(NAMESPACE, "c1"): ("10.1.0.3", False)})
    with pytest.raises(errors.Waiting) as waiting:
        await pool_status.finalize(ctx, pool)
    assert waiting.value.reason == "PoolInUse"
    [ready] = kube.statuses[0]["conditions"]
    assert (ready["reason"], ready["status"]) == ("PoolInUse", "False")
    await pool_status.finalize(context(kube, pool), pool)  # released: the deletion goes on
