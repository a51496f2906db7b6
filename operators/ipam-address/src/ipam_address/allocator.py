"""In-memory allocation state for in-cluster pools: cursors, pending reservations, the claims waiting.

The IPAddress objects are the truth; kopf's index mirrors them. Between choosing an address and the
IPAddress appearing in the index there is a window in which another claim could choose it too, so a
choice is kept as *pending* until the index shows it. Choosing and reserving happen without an `await`
in between, so concurrent reconciles on the one event loop can never pick the same address. After a
restart nothing is pending: kopf fills the index from a fresh list before any claim is reconciled.

It also remembers the address each claim last held, so a claim whose IPAddress was deleted by hand gets
the same one back if it is still free, and which claims wait for a pool to free an address, so that a
release reconciles them and not every claim of the pool.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from ipam_address import spaces
from ipam_address.pools import PoolKey

Owner = Callable[[str], str | None]
"""The claim that holds an address according to the index, or None."""


class Allocator:
    def __init__(self) -> None:
        self._cursors: dict[PoolKey, int] = {}
        self._pending: dict[PoolKey, dict[str, str]] = {}
        self._held: dict[tuple[PoolKey, str], str] = {}
        self._waiting: dict[PoolKey, set[str]] = {}

    def reserve(self, pool: PoolKey, space: spaces.AddressSpace, claim: str, owner: Owner) -> str | None:
        """Choose a free address for `claim` (the one it last held, if still free) and hold it as pending."""
        pending = self._pending.setdefault(pool, {})

        def taken(address: str) -> bool:
            holder = pending.get(address) or owner(address)
            return holder is not None and holder != claim

        preferred = self._held.get((pool, claim))
        if preferred is not None and preferred in space and not taken(preferred):
            address: str | None = preferred
        else:
            address = space.next_free(self._cursors.get(pool, 0), taken)
        if address is not None:
            pending[address] = claim
            self._cursors[pool] = int(ipaddress.ip_address(address)) + 1
            self.holds(pool, claim, address)
        return address

    def settle(self, pool: PoolKey, address: str) -> None:
        """Forget a pending choice: the index now shows it, or creating the IPAddress failed."""
        pending = self._pending.get(pool)
        if pending is not None:
            pending.pop(address, None)

    def holds(self, pool: PoolKey, claim: str, address: str) -> None:
        """`claim` holds `address`: it no longer waits, and gets it back if its IPAddress goes by hand."""
        self._held[(pool, claim)] = address
        self.served(pool, claim)

    def waits(self, pool: PoolKey, claim: str) -> None:
        """`claim` waits for `pool` to free an address (or to become ready)."""
        self._waiting.setdefault(pool, set()).add(claim)

    def served(self, pool: PoolKey, claim: str) -> None:
        waiting = self._waiting.get(pool)
        if waiting is not None:
            waiting.discard(claim)
            if not waiting:
                del self._waiting[pool]

    def forget(self, pool: PoolKey, claim: str) -> None:
        """The claim is gone."""
        self._held.pop((pool, claim), None)
        self.served(pool, claim)

    def wake(self, pool: PoolKey) -> list[str]:
        """The claims waiting for `pool`, which no longer wait: each woken claim that still must wait says
        so again (`waits`), and one deleted meanwhile, never reconciled again, is dropped here."""
        return sorted(self._waiting.pop(pool, ()))
