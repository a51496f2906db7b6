"""Many callers asking one thing each, answered by one request for them all (group commit).

Hundreds of objects reconcile at once when a fleet is applied, and each asked an outside system alone for
its own piece: every NetBox claim made several requests of its own (the device its owner holds, the device
it tries, the read-back, the journal entry, the interfaces), each paying NetBox's whole per-request cost
(authentication, middleware, a transaction), and NetBox was what claims waited for. A `Batch` sends what
its callers ask as one request, and everything asked while that request is in flight as the next one: a
caller alone waits for nothing more than its own request, a crowd shares requests, and their size follows
the load without a timer to tune.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Batch(Generic[K, V]):
    """Answers `get(key)` through `fetch(keys)`, which answers many keys in one request, in their order.

    One request is in flight at a time; it carries the keys asked before it started, up to `capacity` by
    `weight` (a URL's length, a page's size), at least one. A failure goes to the callers of the request
    that failed, as their own request's would have; a caller cancelled while it waits leaves the others'
    request alone.
    """

    def __init__(
        self,
        fetch: Callable[[list[K]], Awaitable[Sequence[V]]],
        capacity: int,
        weight: Callable[[K], int] = lambda _: 1,
    ) -> None:
        self._fetch = fetch
        self._capacity = capacity
        self._weight = weight
        self._waiting: list[tuple[K, asyncio.Future[V]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def get(self, key: K) -> V:
        answer: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.append((key, answer))
        if self._sending is None:
            # A task, not this caller: the keys asked in this same turn of the loop join the first request,
            # and a caller cancelled mid-request does not cancel it for the others.
            self._sending = asyncio.create_task(self._send())
        return await answer

    def _next(self) -> list[tuple[K, asyncio.Future[V]]]:
        taken: list[tuple[K, asyncio.Future[V]]] = []
        load = 0
        for key, answer in self._waiting:
            if taken and load + self._weight(key) > self._capacity:
                break
            taken.append((key, answer))
            load += self._weight(key)
        del self._waiting[: len(taken)]
        return [(key, answer) for key, answer in taken if not answer.done()]

    async def _send(self) -> None:
        try:
            while self._waiting:
                taken = self._next()
                if taken:
                    await self._answer(taken)
        finally:
            self._sending = None
            for _, answer in self._waiting:  # only when this task itself was cancelled (loop shut down)
                answer.cancel()
            self._waiting.clear()

    async def _answer(self, taken: list[tuple[K, asyncio.Future[V]]]) -> None:
        try:
            values = await self._fetch([key for key, _ in taken])
            if len(values) != len(taken):
                raise RuntimeError(f"a batch of {len(taken)} was answered with {len(values)} values")
        except asyncio.CancelledError:
            for _, answer in taken:
                answer.cancel()
            raise
        except Exception as exc:  # each caller gets it, as its own request would have
            for _, answer in taken:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for (_, answer), value in zip(taken, values, strict=True):
            if not answer.done():
                answer.set_result(value)
