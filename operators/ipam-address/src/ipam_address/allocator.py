"""In-memory allocation state for in-cluster pools: cursors, pending reservations, release signals.

The IPAddress objects are the truth; kopf's index mirrors them. Between choosing an address and the
IPAddress appearing in the index there is a window in which another claim could choose it too, so a
choice is kept as *pending* until the index shows it. Choosing and reserving happen without an `await`
in between, so concurrent handlers on the one event loop can never pick the same address. After a
restart nothing is pending: kopf fills the index from a fresh list before any claim is handled.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from contextlib import suppress

from ipam_address import spaces
from ipam_address.pools import PoolKey

Owner = Callable[[str], str | None]
"""The claim that holds an address according to the index, or None."""


class Allocator:
    def __init__(self) -> None:
        self._cursors: dict[PoolKey, int] = {}
        self._pending: dict[PoolKey, dict[str, str]] = {}
        self._released: dict[PoolKey, asyncio.Event] = {}
        self._changed: dict[PoolKey, asyncio.Event] = {}

    def reserve(
        self,
        pool: PoolKey,
        space: spaces.AddressSpace,
        claim: str,
        owner: Owner,
        preferred: str | None = None,
    ) -> str | None:
        """Choose a free address for `claim` (its `preferred` one if still free) and hold it as pending."""
        pending = self._pending.setdefault(pool, {})

        def taken(address: str) -> bool:
            holder = pending.get(address) or owner(address)
            return holder is not None and holder != claim

        if preferred is not None and preferred in space and not taken(preferred):
            address: str | None = preferred
        else:
            address = space.next_free(self._cursors.get(pool, 0), taken)
        if address is not None:
            pending[address] = claim
            self._cursors[pool] = int(ipaddress.ip_address(address)) + 1
            self.changed(pool)
        return address

    def settle(self, pool: PoolKey, address: str) -> None:
        """Forget a pending choice: the index now shows it, or creating the IPAddress failed."""
        pending = self._pending.get(pool)
        if pending is not None:
            pending.pop(address, None)

    def released(self, pool: PoolKey) -> None:
        """An address of `pool` was freed, or the pool grew: wake the claims waiting on it."""
        self._event(self._released, pool).set()
        self.changed(pool)

    def changed(self, pool: PoolKey) -> None:
        """The pool's counts changed: wake its status writer."""
        self._event(self._changed, pool).set()

    async def wait_for_release(self, pool: PoolKey, within: float) -> bool:
        return await self._wait(self._released, pool, within)

    async def wait_for_change(self, pool: PoolKey, within: float) -> bool:
        return await self._wait(self._changed, pool, within)

    async def _wait(self, events: dict[PoolKey, asyncio.Event], pool: PoolKey, within: float) -> bool:
        event = self._event(events, pool)
        with suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), within)
        happened = event.is_set()
        event.clear()
        return happened

    @staticmethod
    def _event(events: dict[PoolKey, asyncio.Event], pool: PoolKey) -> asyncio.Event:
        return events.setdefault(pool, asyncio.Event())
