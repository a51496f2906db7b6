"""Pools as the rest of ipam-address sees them: a key, the facts kept in kopf's index, the address space.

Claims find their pool through kopf's in-memory index (no API read per claim); parsing a pool's spec
into an `AddressSpace` happens once per pool generation, not once per claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from capfleet import errors
from capfleet.api import kinds
from ipam_address import spaces

GROUP = kinds.IPAM_GROUP
IN_CLUSTER = "IPPool"
NETBOX = "NetboxIPPool"
KINDS = frozenset({IN_CLUSTER, NETBOX})


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
    spec: Mapping[str, Any]
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


def key_of_ref(namespace: str, ref: Mapping[str, Any] | None) -> PoolKey | None:
    """The pool a `poolRef` names, when it is one of ours; None for other providers' pools."""
    if not ref or ref.get("apiGroup") != GROUP or ref.get("kind") not in KINDS or not ref.get("name"):
        return None
    return PoolKey(namespace, str(ref["kind"]), str(ref["name"]))


def info_of(body: Mapping[str, Any]) -> PoolInfo:
    meta = body["metadata"]
    conds = (body.get("status") or {}).get("conditions") or []
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    checked = ready is not None and ready.get("observedGeneration") == meta.get("generation")
    return PoolInfo(
        key=PoolKey(meta["namespace"], body["kind"], meta["name"]),
        uid=meta["uid"],
        api_version=body["apiVersion"],
        generation=int(meta.get("generation") or 0),
        spec=dict(body.get("spec") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=body.get("kind") != NETBOX or (checked and ready is not None and ready.get("status") == "True"),
        message=str((ready or {}).get("message") or "not checked yet"),
    )


def space_of(pool: PoolInfo) -> spaces.AddressSpace:
    """The in-cluster pool's address space; raises `InvalidSpec` for a spec the API let through."""
    return _space(pool.uid, pool.generation, _freeze(pool.spec))


def _freeze(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], int, str | None, tuple[str, ...], bool]:
    return (
        tuple(spec.get("addresses") or ()),
        int(spec.get("prefix") or 0),
        spec.get("gateway"),
        tuple(spec.get("excludedAddresses") or ()),
        bool(spec.get("allocateReservedIPAddresses")),
    )


@lru_cache(maxsize=1024)
def _space(
    uid: str, generation: int, frozen: tuple[tuple[str, ...], int, str | None, tuple[str, ...], bool]
) -> spaces.AddressSpace:
    addresses, prefix, gateway, excluded, allocate_reserved = frozen
    if not addresses:
        raise errors.InvalidSpec("the pool lists no addresses", reason="InvalidAddress")
    return spaces.build(
        addresses, prefix=prefix, gateway=gateway, excluded=excluded, allocate_reserved=allocate_reserved
    )
