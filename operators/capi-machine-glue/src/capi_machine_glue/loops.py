"""The reconcile loop of one Hybrid object: run until stopped, reconciling whenever woken.

kopf runs one loop per HybridMachine and HybridCluster as a daemon. A reconcile that must wait (for a
child, for CAPI) raises a capfleet error; the loop then sleeps for that error's backoff, but any change
that concerns the object wakes it at once. So waiting costs nothing, and progress follows events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from capfleet import errors, kube, metrics
from capi_machine_glue.contexts import SETTINGS, Context
from capi_machine_glue.wakeups import Key, sleep_until_woken

log = logging.getLogger(__name__)
MAX_ERROR_DELAY = 60.0


class StopFlag(Protocol):
    """kopf's `stopped` argument of daemons."""

    def __bool__(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Awaitable[Any]: ...


def error_delay(retry: int) -> float:
    return float(min(2**retry, MAX_ERROR_DELAY))


async def run(ctx: Context, key: Key, reconcile: Callable[[], Awaitable[None]], stopped: StopFlag) -> None:
    woken = ctx.wakeups.register(key)
    retry = 0
    try:
        while not stopped:
            woken.clear()
            started = time.monotonic()
            try:
                await reconcile()
            except errors.CapfleetError as exc:
                delay = exc.delay(retry) or SETTINGS.resync_seconds
                result = "permanent" if exc.retry_base is None else "retry"
                retry += 1
                log.info("%s %s/%s: %s: %s", key.kind, key.namespace, key.name, exc.reason, exc.message)
            except kube.KubeError as exc:
                delay, result = error_delay(retry), "error"
                retry += 1
                log.warning("%s %s/%s: API error: %s", key.kind, key.namespace, key.name, exc)
            except Exception:
                delay, result = error_delay(retry), "error"
                retry += 1
                log.exception("%s %s/%s: reconcile failed", key.kind, key.namespace, key.name)
            else:
                delay, result, retry = SETTINGS.resync_seconds, "success", 0
            metrics.record_reconcile(key.kind, result, time.monotonic() - started)
            await sleep_until_woken(woken, stopped.wait, delay)
    finally:
        ctx.wakeups.unregister(key)
