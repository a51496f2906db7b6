"""Waiting out a wait inside the handler, woken when it may be over, instead of handing it to kopf.

A handler that raises `errors.Waiting` becomes a kopf retry: two patches of kopf's progress annotations on
the object, and a backoff that grows past the moment the wait ends. Where the operator itself hears when a
wait may be over (the glue: a watch event of a child it waits to see deleted; baremetal-provision: the
cleaner's callback to its own boot server), the handler waits here instead: it tries again as soon as it
is woken, else after the wait's own backoff, and raises the wait to kopf only once `patience` runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from capfleet import errors


class StopFlag(Protocol):
    """kopf's `stopped` argument of daemons: true once the daemon must end, and awaitable until then."""

    def __bool__(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Awaitable[Any]: ...


async def wait_out(attempt: Callable[[bool], Awaitable[None]], woken: asyncio.Event, patience: float) -> None:
    """Run `attempt` until it raises no `errors.Waiting`, trying again when `woken` is set or the wait's
    backoff has passed; a wait whose next try would come after `patience` seconds is raised. `attempt` is
    told whether `woken` brought it (False for the first try and after a backoff)."""
    started, retry, by_wakeup = time.monotonic(), 0, False
    while True:
        woken.clear()  # before the attempt reads anything: a change while it runs wakes the next at once
        try:
            await attempt(by_wakeup)
            return
        except errors.Waiting as waiting:
            delay = waiting.delay(retry)
            if delay is None or time.monotonic() - started + delay > patience:
                raise
        retry += 1
        by_wakeup = False
        with contextlib.suppress(TimeoutError):
            by_wakeup = await asyncio.wait_for(woken.wait(), delay)
