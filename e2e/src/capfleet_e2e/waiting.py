"""Waiting for a condition in async tests: poll a probe until it holds, with a deadline.

Tests never sleep for a fixed time to let something happen; they state what they wait for, so a slow
machine only makes them slower, and a failure says what never became true and what was last seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    what: str,
    probe: Callable[[], Awaitable[T | None]],
    within: float = 60.0,
    interval: float = 0.2,
    seen: Callable[[], object] | None = None,
) -> T:
    """Await `probe` until it returns something other than None or False; raise after `within` s, saying
    what the probe last returned, or what `seen` says when the probe keeps what it saw to itself."""
    deadline = time.monotonic() + within
    last: object = None
    while True:
        last = await probe()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            last = last if seen is None else seen()
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}; last seen: {last!r}")
        await asyncio.sleep(interval)
