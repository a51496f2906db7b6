"""NetboxIPPool logic: which NetBox client a pool uses, whether the pool is usable, and allocation.

A pool is checked once per change (connection, token, the owner custom field, its prefixes and ranges),
and its Ready condition says what is wrong; claims of a pool that is not Ready wait without calling
NetBox, so a bad token or a missing custom field never turns into a storm of requests. The pool holds its
connection Secret (`capfleet.secretholds`) from its first check until its deletion, which waits for every
address of the pool to be released: the Secret outlives every NetBox IP a claim made with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from capfleet import conditions, errors, netbox, secretholds, statuses
from capfleet.api import capi, kinds
from capfleet.conditions import Update
from capfleet.kube import Kube
from ipam_address.backends.netbox import OWNER_FIELD, Addressing, NetboxAddress, PynetboxAddressing, targets
from ipam_address.pools import PoolInfo, info_of

MANAGED_TAG = "capfleet"
AddressingFactory = Callable[[netbox.Connection], Addressing]


class Clients:
    """One NetBox client per connection Secret version, shared by every claim of the pools that use it."""

    def __init__(self, factory: AddressingFactory | None = None) -> None:
        self._factory = factory or (lambda connection: PynetboxAddressing(netbox.open_api(connection)))
        self._clients: dict[tuple[str, str, str], Addressing] = {}

    async def for_pool(
        self, kube: Kube, pool: PoolInfo, holder: secretholds.Holder | None = None
    ) -> Addressing:
        """The pool's client; `holder` (the pool itself, as just read) first holds the Secret."""
        secret_name = pool.netbox().connection_secret_ref.name
        secret = await secretholds.get_secret(kube, pool.key.namespace, secret_name)
        if secret is None:
            message = f"Secret {pool.key.namespace}/{secret_name} does not exist"
            raise errors.DependencyMissing(message, reason="SecretMissing")
        if holder is not None:
            await secretholds.hold(kube, holder, [secret])
        key = (pool.key.namespace, secret_name, str(secret["metadata"].get("resourceVersion")))
        if key not in self._clients:
            self._clients = {k: v for k, v in self._clients.items() if k[:2] != key[:2]}
            self._clients[key] = self._factory(netbox.connection_from_secret(secret))
        return self._clients[key]


def owner_of(claim: capi.IPAddressClaim, pool: PoolInfo, instance: str | None) -> str:
    """The owner custom field's value: the management cluster's instance name, the claim's namespace/name
    and the pool; stable across restarts and moves. Claims allocated before instance names were recorded
    (`instance` None) keep the value they were allocated under."""
    owner = f"{claim.metadata.namespace}/{claim.metadata.name}@{pool.key.name}"
    return owner if instance is None else f"{instance}/{owner}"


def ip_fields(
    claim: capi.IPAddressClaim, pool: PoolInfo, cluster: str | None, instance: str | None
) -> dict[str, Any]:
    """The NetBox fields of the claim's IP: status, description, tags, owner, tenant and DNS name."""
    name, namespace, spec = claim.metadata.name, claim.metadata.namespace or "", pool.netbox()
    fields: dict[str, Any] = {
        "status": spec.status,
        "description": f"capfleet: IPAddressClaim {namespace}/{name}",
        "tags": [{"slug": slug} for slug in dict.fromkeys([MANAGED_TAG, *spec.tags])],
        "custom_fields": {OWNER_FIELD: owner_of(claim, pool, instance)},
    }
    if spec.tenant:
        fields["tenant"] = {"slug": spec.tenant}
    if spec.dns_name_template:
        fields["dns_name"] = (
            spec.dns_name_template.replace("{name}", name)
            .replace("{namespace}", namespace)
            .replace("{cluster}", cluster or "")
        )
    return fields


async def allocate(
    addressing: Addressing,
    claim: capi.IPAddressClaim,
    pool: PoolInfo,
    cluster: str | None,
    instance: str | None,
) -> NetboxAddress | None:
    """The claim's NetBox address: the one it already owns, else a new one from the first target with room."""
    owned = await addressing.find_owned(owner_of(claim, pool, instance))
    if owned is not None:
        return owned
    fields = ip_fields(claim, pool, cluster, instance)
    for target in targets(pool.netbox()):
        allocated = await addressing.allocate(target, fields)
        if allocated is not None:
            return allocated
    return None


async def release(
    addressing: Addressing, claim: capi.IPAddressClaim, pool: PoolInfo, instance: str | None
) -> None:
    """Delete the claim's NetBox IP, unless the pool's release policy keeps it."""
    owned = await addressing.find_owned(owner_of(claim, pool, instance))
    if owned is not None and pool.netbox().release_policy == "Delete":
        await addressing.release(owned.id)


def pool_status(body: Mapping[str, Any], failure: errors.CapfleetError | None) -> dict[str, Any]:
    ready = (
        Update.true(conditions.READY, "Ready", "NetBox connection, custom field and prefixes checked")
        if failure is None
        else Update.false(conditions.READY, failure.reason, failure.message)
    )
    generation = body["metadata"].get("generation")
    return {"conditions": statuses.with_conditions(body.get("status") or {}, [ready], generation=generation)}


async def check_into(
    kube: Kube, clients: Clients, body: Mapping[str, Any], patch_status: MutableMapping[str, Any]
) -> None:
    """Check a NetBox pool and write its Ready condition; raise (to retry) when the check failed."""
    pool = info_of(body)
    failure: errors.CapfleetError | None = None
    try:
        addressing = await clients.for_pool(kube, pool, holder_of(body))
        await addressing.check(targets(pool.netbox()))
    except errors.CapfleetError as exc:
        failure = exc
    statuses.merge_into(patch_status, body.get("status") or {}, pool_status(body, failure))
    if failure is not None:
        raise failure


def holder_of(body: Mapping[str, Any]) -> secretholds.Holder:
    return secretholds.Holder(kinds.NETBOX_IPPOOL.resource, body["metadata"])


async def let_go(kube: Kube, body: Mapping[str, Any]) -> None:
    """The last step of a NetBox pool's deletion, once no address of it is left."""
    if body.get("kind") == kinds.NETBOX_IPPOOL.kind:
        await secretholds.let_go(kube, holder_of(body))
