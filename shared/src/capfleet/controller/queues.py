"""The engine's work queue: which objects are due for a reconcile, each once, in the order they became due.

Watch events only say "this key may need work"; the queue turns a burst of them into one reconcile per
object, as client-go's workqueue does for controller-runtime:

- a key is queued at most once (a second `add` while it waits is a no-op);
- a key being reconciled is never handed out twice at once: an `add` meanwhile marks it dirty, and
  `done` queues it again, so the change that came during the reconcile is not lost;
- `add_after` queues a key at a later time (a requeue, a retry's backoff); an earlier due time wins over a
  later one, and an `add` now wins over both;
- keys come out first-due, first-out.

`Schedule` holds all of that as plain state with the time passed in, so it is tested without a clock;
`WorkQueue` drives it on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class Schedule(Generic[K]):
    """The queue's state: keys ready now (FIFO), keys due later (by time), keys being reconciled."""

    _ready: dict[K, None] = field(default_factory=dict)  # insertion-ordered: FIFO without repeats
    _due: dict[K, float] = field(default_factory=dict)
    _timeline: list[tuple[float, int, K]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)
    _processing: set[K] = field(default_factory=set)
    _dirty: set[K] = field(default_factory=set)

    def add(self, key: K) -> None:
        """`key` needs a reconcile now."""
        self._due.pop(key, None)  # its timeline entry is dropped when popped
        if key in self._processing:
            self._dirty.add(key)
        else:
            self._ready[key] = None

    def add_at(self, key: K, when: float) -> None:
        """`key` needs a reconcile at `when` (unless it is due sooner)."""
        if key in self._ready or key in self._dirty:
            return
        if self._due.get(key, float("inf")) <= when:
            return
        self._due[key] = when
        heapq.heappush(self._timeline, (when, next(self._order), key))

    def promote(self, now: float) -> float | None:
        """Move the keys due by `now` to the ready ones; return when the next later key is due."""
        while self._timeline:
            when, _, key = self._timeline[0]
            if self._due.get(key) != when:  # superseded by an earlier due time or an add
                heapq.heappop(self._timeline)
                continue
            if when > now:
                return when
            heapq.heappop(self._timeline)
            del self._due[key]
            self.add(key)
        return None

    def take(self) -> K | None:
        """The first ready key, now being reconciled; None when none is ready."""
        for key in self._ready:
            del self._ready[key]
            self._processing.add(key)
            return key
        return None

    def done(self, key: K) -> None:
        """`key`'s reconcile ended: queued again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def forget(self, key: K) -> None:
        """Drop any later due time of `key` (its object is gone)."""
        self._due.pop(key, None)

    def __len__(self) -> int:
        """Keys waiting: ready, dirty or due later (not those being reconciled)."""
        return len(self._ready) + len(self._dirty) + len(self._due)

    def processing(self, key: K) -> bool:
        return key in self._processing

    def ready(self) -> int:
        """How many keys are ready now."""
        return len(self._ready)


class WorkQueue(Generic[K]):
    """`Schedule` on the event loop: `get` waits for the next ready key, due times are the loop's clock."""

    def __init__(self) -> None:
        self.schedule: Schedule[K] = Schedule()
        self._changed = asyncio.Event()
        self._closed = False

    def add(self, key: K) -> None:
        self.schedule.add(key)
        self._changed.set()

    def add_after(self, key: K, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        self.schedule.add_at(key, asyncio.get_running_loop().time() + seconds)
        self._changed.set()

    def done(self, key: K) -> None:
        self.schedule.done(key)
        self._changed.set()

    def forget(self, key: K) -> None:
        self.schedule.forget(key)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake every waiting `get`, which then returns None."""
        self._closed = True
        self._changed.set()

    async def get(self) -> K | None:
        """The next ready key (call `done` with it after its reconcile), or None once closed."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            later = self.schedule.promote(loop.time())
            key = self.schedule.take()
            if key is not None:
                if self.schedule.ready():
                    self._changed.set()  # more are ready: the next waiting worker need not sleep
                return key
            self._changed.clear()
            timeout = None if later is None else max(later - loop.time(), 0.0)
            with contextlib.suppress(TimeoutError):  # a due time came
                await asyncio.wait_for(self._changed.wait(), timeout)
        return None
