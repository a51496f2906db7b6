"""What every ipam-address reconcile shares: the kit's API client and Event recorder, plus its own parts.

The allocator, the NetBox clients and the `Lookups` are created once at startup in the operator-wide
memo. The `Lookups` are kopf's indexes as plain functions, so the logic never depends on kopf; kopf
holds every event, and so every reconcile, until each index is filled from a fresh list, which is what
makes a restart in the middle of a burst safe: every IPAddress is known before a claim is served.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import instances, reconciling
from capfleet.api.base import Condition
from capfleet.controller import contexts as controller
from ipam_address import netbox_pools
from ipam_address.allocator import Allocator, Owner
from ipam_address.pools import PoolInfo, PoolKey
from ipam_address.settings import IpamSettings

ALLOCATOR_KEY, NETBOX_CLIENTS_KEY, IDENTITY_KEY = "allocator", "netbox_clients", "identity"
NOTICES_KEY, LOOKUPS_KEY = "notices", "lookups"


@dataclass
class Identity:
    """This management cluster's instance name, once resolved (operator-wide, in memo)."""

    instance: str | None = None


@dataclass
class Notices:
    """The objects this process has told something that stays true while they exist (a claim's poolRef
    names a deprecated kind), so each is told once, and once more after a restart; bounded like the Event
    recorder's memory."""

    capacity: int = 20_000
    told: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def first(self, uid: str) -> bool:
        """Whether the object `uid` is told now for the first time; it is remembered as told."""
        if uid in self.told:
            return False
        self.told[uid] = None
        while len(self.told) > self.capacity:
            self.told.popitem(last=False)
        return True


@dataclass(frozen=True)
class Lookups:
    """Read-only views of kopf's indexes."""

    pool: Callable[[PoolKey], PoolInfo | None]
    owner: Callable[[PoolKey], Owner]
    address_of_claim: Callable[[str, str], tuple[str, bool] | None]
    """The address of a claim's IPAddress, and whether that IPAddress is being deleted."""
    addresses: Callable[[PoolKey], list[str]]
    """The addresses allocated from a pool."""


def start(memo: MutableMapping[str, Any], lookups: Lookups) -> None:
    """Create the operator-wide parts, once, at startup."""
    memo[LOOKUPS_KEY] = lookups
    memo[ALLOCATOR_KEY] = Allocator()
    memo[NETBOX_CLIENTS_KEY] = netbox_pools.Clients()
    memo[IDENTITY_KEY] = Identity()
    memo[NOTICES_KEY] = Notices()


@dataclass
class Context(controller.Context):
    """What every claim and pool operation needs: the API, the allocation state, NetBox, kopf's indexes."""

    finalizer: str = field(kw_only=True)
    """The operator's finalizer, which a bound claim carries until its address is released."""
    lookups: Lookups = reconciling.in_memo(LOOKUPS_KEY)
    allocator: Allocator = reconciling.in_memo(ALLOCATOR_KEY)
    netbox_clients: netbox_pools.Clients = reconciling.in_memo(NETBOX_CLIENTS_KEY)
    settings: IpamSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)
    identity: Identity = reconciling.in_memo(IDENTITY_KEY)
    notices: Notices = reconciling.in_memo(NOTICES_KEY)

    async def instance(self) -> str:
        """This management cluster's instance name (`capfleet.instances`), resolved once."""
        if self.identity.instance is None:
            self.identity.instance = await instances.resolve(self.kube, self.settings.instance)
        return self.identity.instance

    async def announce(self, body: Mapping[str, Any], ready: Condition) -> None:
        """Nothing: ipam-address has only ever posted Warnings with a failure's own reason (SecretMissing
        where Ready says AllocationFailed), which Ready does not hold; `serving.write_failure` posts them
        where the error is caught. A bound claim is the normal case, not news."""
