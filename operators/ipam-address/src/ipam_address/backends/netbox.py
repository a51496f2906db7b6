"""NetboxIPPool's addresses in NetBox: find the one a claim owns, allocate atomically, release.

Allocation goes only through NetBox's `available-ips` endpoints, which lock on the server, so two
operators (or two management clusters) can never take the same address. Every IP written carries the
owner custom field (exact-match), so a claim finds its address again after a lost status, a clusterctl
move or a crash between the NetBox write and the IPAddress write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from capfleet import errors, netbox, netboxschema
from capfleet.api.ipam import NetboxIPPoolSpec

OWNER_FIELD = netboxschema.OWNER.name


@dataclass(frozen=True)
class Target:
    """Where to allocate from: a prefix or an IP range, by id or by its addresses and VRF."""

    kind: str  # "prefix" | "range"
    id: int | None = None
    cidr: str | None = None
    start: str | None = None
    end: str | None = None
    vrf: str | None = None

    def describe(self) -> str:
        if self.id is not None:
            return f"{self.kind} #{self.id}"
        where = self.cidr if self.kind == "prefix" else f"{self.start}-{self.end}"
        return f"{self.kind} {where}" + (f" in VRF {self.vrf}" if self.vrf else "")


@dataclass(frozen=True)
class NetboxAddress:
    id: int
    address: str
    """With its mask, as NetBox stores it: 10.0.0.5/24."""

    @property
    def ip(self) -> str:
        return self.address.split("/", 1)[0]

    @property
    def prefix_length(self) -> int:
        return int(self.address.split("/", 1)[1])


class Addressing(Protocol):
    """NetBox as ipam-address needs it. Every method raises `CapfleetError`s (see capfleet.netbox)."""

    async def find_owned(self, owner: str) -> NetboxAddress | None: ...

    async def allocate(self, target: Target, fields: Mapping[str, Any]) -> NetboxAddress | None:
        """An address from `target`, or None when it is full (NetBox's 409)."""

    async def release(self, address_id: int) -> None:
        """Delete the IP; an IP that is already gone is fine."""

    async def check(self, pool_targets: list[Target]) -> None:
        """Raise unless the token works, the owner custom field is usable and every target exists."""


def targets(spec: NetboxIPPoolSpec) -> list[Target]:
    """The pool's prefixes, then its IP ranges, in the order they are tried."""
    found = [Target("prefix", id=p.id, cidr=p.cidr, vrf=p.vrf) for p in spec.prefixes]
    found += [
        Target("range", id=r.id, start=r.start_address, end=r.end_address, vrf=r.vrf) for r in spec.ip_ranges
    ]
    return found


class PynetboxAddressing:
    """`Addressing` over pynetbox."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self._parents: dict[Target, Any] = {}

    async def find_owned(self, owner: str) -> NetboxAddress | None:
        found = await netbox.call(
            "find-owned", lambda: list(self._api.ipam.ip_addresses.filter(**{f"cf_{OWNER_FIELD}": owner}))
        )
        owned = [ip for ip in found if (ip.custom_fields or {}).get(OWNER_FIELD) == owner]
        if len(owned) > 1:
            ids = ", ".join(str(ip.id) for ip in owned)
            raise errors.BackendRejected(
                f"NetBox holds several IPs owned by {owner} (ids {ids})", reason="DuplicateOwner"
            )
        return NetboxAddress(owned[0].id, str(owned[0].address)) if owned else None

    async def _parent(self, target: Target) -> Any:
        if target in self._parents:
            return self._parents[target]
        endpoint = self._api.ipam.prefixes if target.kind == "prefix" else self._api.ipam.ip_ranges
        if target.id is not None:
            parent = await netbox.call(f"get-{target.kind}", endpoint.get, target.id)
        else:
            query: dict[str, Any] = (
                {"prefix": target.cidr}
                if target.kind == "prefix"
                else {"start_address": target.start, "end_address": target.end}
            )
            if target.vrf:
                vrf = await netbox.call("get-vrf", self._api.ipam.vrfs.get, name=target.vrf)
                if vrf is None:
                    raise errors.BackendRejected(
                        f"NetBox has no VRF named {target.vrf}", reason="VRFNotFound"
                    )
                query["vrf_id"] = vrf.id
            else:
                query["vrf_id"] = "null"
            matches = await netbox.call(f"find-{target.kind}", lambda: list(endpoint.filter(**query)))
            parent = matches[0] if len(matches) == 1 else None
        if parent is None:
            raise errors.BackendRejected(f"NetBox has no {target.describe()}", reason="PrefixNotFound")
        self._parents[target] = parent
        return parent

    async def allocate(self, target: Target, fields: Mapping[str, Any]) -> NetboxAddress | None:
        parent = await self._parent(target)
        try:
            created = await netbox.call("allocate", parent.available_ips.create, dict(fields))
        except netbox.Exhausted:
            return None
        record = created[0] if isinstance(created, list) else created
        return NetboxAddress(int(record.id), str(record.address))

    async def check(self, pool_targets: list[Target]) -> None:
        fields = await netbox.call(
            "check-custom-field",
            lambda: [dict(f) for f in self._api.extras.custom_fields.filter(name=OWNER_FIELD)],
        )
        problem = netboxschema.field_problem(fields, netboxschema.OWNER, netboxschema.IP_ADDRESS)
        if problem:
            reason = "CustomFieldMisconfigured" if fields else "CustomFieldMissing"
            raise errors.BackendRejected(problem, reason=reason)
        self._parents.clear()
        for target in pool_targets:
            await self._parent(target)

    async def release(self, address_id: int) -> None:
        def delete() -> None:
            record = self._api.ipam.ip_addresses.get(address_id)
            if record is not None:
                record.delete()

        await netbox.call("release", delete)
