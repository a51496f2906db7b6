"""The reconcile loop of one Hybrid object: run until stopped, reconciling whenever woken.

kopf runs one loop per HybridMachine and HybridCluster as a daemon. A reconcile that must wait (for a
child, for CAPI) raises a capfleet error; the loop then sleeps for that error's backoff (the fleet's one
retry policy, `CapfleetError.delay`), but any change that concerns the object wakes it at once. So
waiting costs nothing, and progress follows events. Without a failure, or after one that only a change
can fix, the loop sleeps for the resync setting. A change that wakes it is usually the first of a few
(a child's creation, its finalizer, its first status): the loop lets them settle for a moment
(`settle_seconds`) and reconciles once for all of them.

A reconcile woken by a change reads what the watches have shown (`cache`); one woken by the resync or a
retry's backoff reads from the API server, except after a `TimedWait`, whose end is known in advance.

Deletion is woken the same way (`waiting_out`): it looks again for the children when one of them changes
or goes, instead of at kopf's next retry.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import capfleet.patience
from capfleet import errors, metrics
from capfleet.controller import engine
from capfleet.controller.caches import Reads
from capfleet.patience import StopFlag
from capi_machine_glue.contexts import Context
from capi_machine_glue.wakeups import Key, settle, sleep_until_woken


class TimedWait(errors.Waiting):
    """A wait that ends at a time the reconcile knows (a grace), not one that doubts what the watches
    showed: its retry comes when its delay says, unjittered, and reads from the watch cache, as a
    reconcile woken by a change does."""


async def run(
    ctx: Context, key: Key, reconcile: Callable[[Reads], Awaitable[None]], stopped: StopFlag
) -> None:
    woken = ctx.wakeups.register(key)
    retry = 0
    from_cache = True  # kopf starts the loop on the event that showed its object
    try:
        while not stopped:
            woken.clear()
            started = time.monotonic()
            timed = False
            try:
                await reconcile(ctx.cache.reader(ctx.kube) if from_cache else ctx.kube)
            except Exception as exc:  # every failure is retried: the loop must outlive it
                error, result = engine.as_capfleet_error(exc, key.kind, engine.Key(key.namespace, key.name))
                timed = isinstance(error, TimedWait)
                backoff = error.delay(retry)
                if backoff is None:
                    delay = ctx.settings.resync_seconds
                else:  # a timed wait's end is its own: jitter would only retry before it
                    delay = backoff if timed else errors.jittered(backoff)
                retry += 1
                # Not kept while the loop sleeps: its traceback holds every frame of the failed reconcile
                # and all it read, and a loop keeps sleeping after later successes too.
                del error
            else:
                delay, result, retry = ctx.settings.resync_seconds, "success", 0
            metrics.record_reconcile(key.kind, result, time.monotonic() - started)
            by_event = await sleep_until_woken(woken, stopped.wait, delay)
            if by_event:
                await settle(stopped.wait, ctx.settings.settle_seconds)
            from_cache = by_event or timed
    finally:
        ctx.wakeups.unregister(key, woken)


async def waiting_out(
    ctx: Context, key: Key, attempt: Callable[[bool], Awaitable[None]], patience: float
) -> None:
    """Run `attempt` until it no longer waits, looking again when a change to the object or one of its
    children wakes it (`patience.wait_out`): a deletion waits for the children's operators to release
    them, and ends when the last child's deletion is seen, with none of kopf's retry writes (the status
    still says what it waits for)."""
    woken = ctx.wakeups.register(key)
    try:
        await capfleet.patience.wait_out(attempt, woken, patience)
    finally:
        ctx.wakeups.unregister(key, woken)
