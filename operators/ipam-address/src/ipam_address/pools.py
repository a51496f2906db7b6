"""Pools and addresses as the rest of ipam-address sees them: keys, the facts kept in kopf's indexes, spaces.

Claims find their pool through kopf's in-memory index (no API read per claim); parsing a pool's spec
into an `AddressSpace` happens once per pool generation, not once per claim. Pools are read through their
models (`kinds.HYBRID_IPPOOL`, `kinds.NETBOX_IPPOOL`), IPAddresses through CAPI's (`capfleet.api.capi`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from capfleet import conditions, errors, versions
from capfleet.api import capi, ipam, kinds
from ipam_address import spaces

GROUP = kinds.IPAM_GROUP
IN_CLUSTER = kinds.HYBRID_IPPOOL.kind
NETBOX = kinds.NETBOX_IPPOOL.kind
KINDS = frozenset({IN_CLUSTER, NETBOX})

DEPRECATED_IN_CLUSTER = "IPPool"
"""What HybridIPPool was called before it was renamed (`kubectl get ippool` found Metal3's or Calico's
IPPool instead). A claim's poolRef is immutable, so claims made before the rename still name it: they are
served from the HybridIPPool of the same name, with a `DeprecatedPoolKind` Warning on the claim, and the
IPAddresses made for them before (their poolRef is immutable too) count in that HybridIPPool, so none of
their addresses is handed out again. Deprecated alias, to be removed in v1alpha2."""

PoolSpec = ipam.HybridIPPoolSpec | ipam.NetboxIPPoolSpec


class PoolKey(NamedTuple):
    namespace: str
    kind: str
    name: str

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class PoolInfo:
    """What kopf's pool index keeps of a pool: enough to allocate and to reference it."""

    key: PoolKey
    uid: str
    api_version: str
    generation: int
    spec: PoolSpec
    deleting: bool
    ready: bool = True
    message: str = ""
    """For NetBox pools: whether the last check passed, and what it found."""

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.key.kind,
            "name": self.key.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": True,
        }

    def in_cluster(self) -> ipam.HybridIPPoolSpec:
        if not isinstance(self.spec, ipam.HybridIPPoolSpec):
            raise TypeError(f"{self.key.describe()} is not an in-cluster pool")
        return self.spec

    def netbox(self) -> ipam.NetboxIPPoolSpec:
        if not isinstance(self.spec, ipam.NetboxIPPoolSpec):
            raise TypeError(f"{self.key.describe()} is not a NetBox pool")
        return self.spec


@dataclass(frozen=True)
class Holding:
    """An IPAddress of one of our pools: the pool, its address (canonical), and the claim it belongs to."""

    pool: PoolKey
    address: str
    claim: str
    deleting: bool


def key_of_ref(namespace: str, ref: capi.TypedReference | None) -> PoolKey | None:
    """The pool a `poolRef` names, when it is one of ours; None for other providers' pools. A ref to the
    deprecated kind IPPool names the HybridIPPool of the same name (`DEPRECATED_IN_CLUSTER`)."""
    if ref is None or ref.api_group != GROUP or not ref.name:
        return None
    kind = IN_CLUSTER if ref.kind == DEPRECATED_IN_CLUSTER else ref.kind  # alias: removed in v1alpha2
    return PoolKey(namespace, kind, ref.name) if kind in KINDS else None


def names_deprecated_kind(ref: capi.TypedReference | None) -> bool:
    """Whether a `poolRef` of ours names its pool by the deprecated kind IPPool (removed in v1alpha2)."""
    return ref is not None and ref.api_group == GROUP and ref.kind == DEPRECATED_IN_CLUSTER


def _holding_of(body: Mapping[str, Any]) -> Holding | None:
    try:
        found = capi.IPAddress.parse(body)
    except ValueError:  # not a complete IPAddress, so not one this operator wrote
        return None
    key = key_of_ref(found.metadata.namespace or "", found.spec.pool_ref)
    if key is None or not found.spec.address:
        return None
    claim = found.spec.claim_ref.name or found.metadata.name
    return Holding(key, spaces.canonical(found.spec.address), claim, bool(found.metadata.deletion_timestamp))


holding_of = versions.per_version(_holding_of)
"""What an IPAddress holds, when it is an address of one of our pools; None for any other."""


def info_of(body: Mapping[str, Any]) -> PoolInfo:
    pool = kinds.NETBOX_IPPOOL.parse(body) if body["kind"] == NETBOX else kinds.HYBRID_IPPOOL.parse(body)
    meta = pool.metadata
    ready = conditions.find(pool.status.conditions if pool.status else [], conditions.READY)
    checked = ready is not None and ready.observed_generation == meta.get("generation")
    return PoolInfo(
        key=PoolKey(meta["namespace"], pool.kind, meta["name"]),
        uid=meta["uid"],
        api_version=pool.api_version,
        generation=int(meta.get("generation") or 0),
        spec=pool.spec,
        deleting=bool(meta.get("deletionTimestamp")),
        ready=pool.kind != NETBOX or (checked and ready is not None and ready.status == "True"),
        message=(ready.message if ready is not None else "") or "not checked yet",
    )


def space_of(pool: PoolInfo) -> spaces.AddressSpace:
    """The in-cluster pool's address space; raises `InvalidSpec` for a spec the API let through."""
    return _space(pool.uid, pool.generation, _freeze(pool.in_cluster()))


_Frozen = tuple[tuple[str, ...], int, str | None, tuple[str, ...], bool]


def _freeze(spec: ipam.HybridIPPoolSpec) -> _Frozen:
    """The spec as a hashable key of the space cache."""
    return (
        tuple(spec.addresses),
        spec.prefix,
        spec.gateway,
        tuple(spec.excluded_addresses),
        spec.allocate_reserved_ip_addresses,
    )


@lru_cache(maxsize=1024)
def _space(uid: str, generation: int, frozen: _Frozen) -> spaces.AddressSpace:
    addresses, prefix, gateway, excluded, allocate_reserved = frozen
    if not addresses:
        raise errors.InvalidSpec("the pool lists no addresses", reason="InvalidAddress")
    return spaces.build(
        addresses, prefix=prefix, gateway=gateway, excluded=excluded, allocate_reserved=allocate_reserved
    )
