"""In-process wake-up signals: a change to anything a Hybrid object depends on wakes its reconcile loop.

The glue is level-triggered: each HybridMachine and HybridCluster has one loop (a kopf daemon) that
reconciles from scratch whenever it wakes. It wakes on a change to the object itself, to one of its
children (found through ownerReferences), to its CAPI Machine, or to its Cluster and HybridCluster, and
otherwise on a slow resync. The watch handlers only poke; they never reconcile, so a burst of child events
costs one reconcile, not one per event; a woken loop first lets the burst settle (`settle`). A deletion
waiting for the children to go is woken by the same pokes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

HYBRID_MACHINE = "HybridMachine"
HYBRID_CLUSTER = "HybridCluster"


@dataclass(frozen=True)
class Key:
    kind: str
    namespace: str
    name: str


@dataclass
class Wakeups:
    """The events of the running waiters (a loop, a deletion) of each object, and which CAPI cluster
    each object belongs to."""

    _events: dict[Key, list[asyncio.Event]] = field(default_factory=dict)
    _clusters: dict[Key, tuple[str, str]] = field(default_factory=dict)

    def register(self, key: Key) -> asyncio.Event:
        """A new waiter for `key`: every poke of the key sets its event until it is unregistered."""
        event = asyncio.Event()
        self._events.setdefault(key, []).append(event)
        return event

    def unregister(self, key: Key, event: asyncio.Event) -> None:
        waiters = self._events.get(key, [])
        if event in waiters:
            waiters.remove(event)
        if not waiters:
            self._events.pop(key, None)
            self._clusters.pop(key, None)

    def belongs_to(self, key: Key, namespace: str, cluster: str) -> None:
        self._clusters[key] = (namespace, cluster)

    def poke(self, key: Key) -> bool:
        waiters = self._events.get(key, [])
        for event in waiters:
            event.set()
        return bool(waiters)

    def poke_cluster(self, namespace: str, cluster: str) -> int:
        """Wake every loop of the CAPI cluster `namespace/cluster`; return how many."""
        keys = [key for key, owner in self._clusters.items() if owner == (namespace, cluster)]
        return sum(self.poke(key) for key in keys)


async def _wait(awaitable: Awaitable[Any]) -> None:
    await awaitable


async def sleep_until_woken(
    event: asyncio.Event, stopped: Callable[[], Awaitable[Any]] | None, seconds: float
) -> bool:
    """Return when `event` is set, `stopped()` completes (the loop must end), or after `seconds`; whether
    `event` woke it."""
    waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(event.wait())]
    if stopped is not None:
        waiters.append(asyncio.ensure_future(_wait(stopped())))
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return event.is_set()


async def settle(stopped: Callable[[], Awaitable[Any]] | None, seconds: float) -> None:
    """Wait `seconds`, or until `stopped()` completes: a woken loop lets the changes that follow one
    another settle (a child created, its finalizer added, its first status written, each an event) before
    it reconciles, so they cost one reconcile and one status write instead of one each."""
    if seconds > 0:
        await sleep_until_woken(asyncio.Event(), stopped, seconds)
