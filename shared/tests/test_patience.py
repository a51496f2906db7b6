"""Waiting out a wait in the handler: woken early, handed to kopf after patience (real timing, short)."""

from __future__ import annotations

import asyncio
import time

import pytest

from capfleet import errors, patience


class Pending(errors.Waiting):
    retry_base = 600.0
    retry_cap = 600.0


async def test_a_wait_ends_as_soon_as_it_is_woken_not_after_its_backoff() -> None:
    woken, tries = asyncio.Event(), asyncio.Queue[tuple[int, bool]]()
    left = [2]

    async def attempt(by_wakeup: bool) -> None:
        tries.put_nowait((left[0], by_wakeup))
        if left[0]:
            raise Pending("not yet")

    waiting = asyncio.create_task(patience.wait_out(attempt, woken, patience=3600.0))
    assert await asyncio.wait_for(tries.get(), 5.0) == (2, False)
    for remaining in (1, 0):
        left[0] = remaining
        woken.set()
        assert await asyncio.wait_for(tries.get(), 5.0) == (remaining, True)
    await asyncio.wait_for(waiting, 5.0)


class Brief(errors.Waiting):
    retry_base = 0.05
    retry_cap = 0.05


async def test_a_try_after_the_backoff_is_told_no_change_woke_it() -> None:
    tries: list[bool] = []

    async def attempt(by_wakeup: bool) -> None:
        tries.append(by_wakeup)
        if len(tries) < 3:
            raise Brief("not yet")

    await asyncio.wait_for(patience.wait_out(attempt, asyncio.Event(), patience=3600.0), 5.0)
    assert tries == [False, False, False]


async def test_a_wait_longer_than_the_patience_is_raised_at_once() -> None:
    wait = Pending("not yet")

    async def attempt(_by_wakeup: bool) -> None:
        raise wait

    started = time.monotonic()
    with pytest.raises(Pending) as raised:
        await patience.wait_out(attempt, asyncio.Event(), patience=60.0)
    assert raised.value is wait
    assert time.monotonic() - started < 5.0, "a 600 s backoff over a 60 s patience is not slept through"


async def test_errors_that_are_not_waits_are_raised_at_once() -> None:
    async def attempt(_by_wakeup: bool) -> None:
        raise errors.InvalidSpec("bad")

    with pytest.raises(errors.InvalidSpec):
        await asyncio.wait_for(patience.wait_out(attempt, asyncio.Event(), patience=3600.0), 5.0)
