"""What every ipam-address reconcile shares: the kit's API client and Event recorder, plus its own parts.

The allocator and the NetBox clients are created once at startup in the operator-wide memo: kopf gives
each object a shallow copy of memo, so an allocator created inside a handler would be private to one
claim. The `Lookups` are kopf's indexes as plain functions, so the logic never depends on kopf.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from capfleet import reconciling
from capfleet.api.base import Condition
from ipam_address import netbox_pools
from ipam_address.allocator import Allocator, Owner
from ipam_address.pools import PoolInfo, PoolKey

ALLOCATOR_KEY, NETBOX_CLIENTS_KEY = "allocator", "netbox_clients"


@dataclass(frozen=True)
class Lookups:
    """Read-only views of kopf's indexes."""

    pool: Callable[[PoolKey], PoolInfo | None]
    owner: Callable[[PoolKey], Owner]
    address_of_claim: Callable[[str, str], tuple[str, bool] | None]
    """The address of a claim's IPAddress, and whether that IPAddress is being deleted."""


def start(memo: MutableMapping[str, Any]) -> None:
    """Create the operator-wide parts, once, at startup."""
    memo[ALLOCATOR_KEY] = Allocator()
    memo[NETBOX_CLIENTS_KEY] = netbox_pools.Clients()


@dataclass
class Context(reconciling.Context):
    """What every claim and pool operation needs: the API, the allocation state, NetBox, kopf's indexes."""

    lookups: Lookups
    allocator: Allocator = reconciling.in_memo(ALLOCATOR_KEY)
    netbox_clients: netbox_pools.Clients = reconciling.in_memo(NETBOX_CLIENTS_KEY)

    async def announce(self, body: Mapping[str, Any], ready: Condition) -> None:
        """Nothing: ipam-address has only ever posted Warnings with a failure's own reason (SecretMissing
        where Ready says AllocationFailed), which Ready does not hold; `serving.write_failure` posts them
        where the error is caught. A bound claim is the normal case, not news."""
