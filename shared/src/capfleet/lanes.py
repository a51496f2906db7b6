"""Blocking client libraries run in thread pools of their own, never in the event loop's default executor.

pynetbox, sushy, pyghmi and libvirt block; operators call them from worker threads. `asyncio.to_thread`
would use the loop's default executor, which has only `min(32, CPUs + 4)` threads (six on two cores), and
which aiohttp needs too: the API client kubernetes_asyncio builds opens its session with `trust_env`, so
every API request first looks up `.netrc` and the proxy settings in that executor. With NetBox slow under
many claims, netbox-device's pynetbox calls would fill it, each waiting up to its own timeout, and the
operator's API requests would queue behind them and time out without reaching the API server, while the
event loop sat idle.

So each blocking backend gets a `Lane`: a bounded pool of named threads (`capfleet-netbox_0`, …) that
also caps how many calls an operator has open against that system at once. Work that does not fit waits
in the lane's own queue, and the default executor stays free for the event loop's housekeeping.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Lane:
    """A named pool of `threads` worker threads for one blocking backend; threads start when needed."""

    def __init__(self, name: str, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"lane {name} needs at least one thread, not {threads}")
        self.name = name
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"capfleet-{name}")

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in one of the lane's threads, with the caller's context variables (as
        `asyncio.to_thread` passes them). Cancelling the caller stops waiting, not a call already running:
        no thread can be interrupted."""
        context = contextvars.copy_context()
        work = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def __repr__(self) -> str:
        return f"Lane({self.name!r}, threads={self.threads})"
