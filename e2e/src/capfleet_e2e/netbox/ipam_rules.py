"""IPAM validation and filter helpers, after NetBox's ipam/models/ip.py and ipam/filtersets.py.

Rules: a prefix's host bits are cleared; duplicates are refused in the global table when
ENFORCE_GLOBAL_UNIQUE is on (the default) and in a VRF whose enforce_unique is on (the default), comparing
addresses without their masks; anycast-style roles may repeat; no IP inside a range marked populated.
Filters: `address`/`start_address` match the exact address/mask when given a mask and the host in any
mask otherwise (NetBox's net_in lookup); `parent` matches addresses inside a prefix whatever their mask.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.errors import ValidationFailed
from capfleet_e2e.netbox.fields import Text
from capfleet_e2e.netbox.rules import assignment_parent, host, ip_key
from capfleet_e2e.netbox.spec import Ctx, Field, Filter, Predicate, Record

VRF = "ipam.vrf"
TENANT = "tenancy.tenant"
NONUNIQUE_ROLES = {"anycast", "vip", "vrrp", "hsrp", "glbp", "carp"}


def common(*, description: int = 200) -> tuple[Field, ...]:
    return (
        Field("description", Text(max_length=description), nullable=False, default=""),
        Field("comments", Text(), nullable=False, default=""),
    )


def tenancy_filters() -> dict[str, Filter]:
    return {"tenant_id": f.Related("tenant", TENANT), "tenant": f.Related("tenant", TENANT, "slug")}


def vrf_filters() -> dict[str, Filter]:
    return {"vrf_id": f.Related("vrf", VRF), "vrf": f.Related("vrf", VRF, "rd")}


def net(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(value, strict=False)


def address_in(values: list[str], attr: str) -> Predicate:
    """NetBox's net_in lookup: with a mask, the exact address/mask; without, the host in any mask."""
    parsed: list[str] = []
    for value in values:
        try:
            parsed.append(
                str(ipaddress.ip_interface(value.strip())) if "/" in value else str(host(value.strip()))
            )
        except ValueError:
            continue
    if not parsed:
        return lambda r: False
    return lambda r: r.get(attr) is not None and (r[attr] in parsed or str(host(r[attr])) in parsed)


def contained_in(values: list[str], *attrs: str) -> Predicate:
    """`parent`: every given address lies (host part, mask ignored) inside one of the prefixes."""
    try:
        nets = [net(v.strip()) for v in values]
    except ValueError:
        return lambda r: False
    return lambda r: any(all(host(r[a]) in n for a in attrs) for n in nets)


def table_name(vrf: Record | None) -> str:
    return f"VRF {vrf['name']}" if vrf else "global table"


def enforce_unique(vrf: Record | None, ctx: Ctx) -> bool:
    return bool(vrf["enforce_unique"]) if vrf else ctx.config.enforce_global_unique


def clean_prefix(record: Record, existing: Record | None, ctx: Ctx) -> None:
    prefix = net(record["prefix"])
    if prefix.prefixlen == 0:
        raise ValidationFailed.on("prefix", "Cannot create prefix with /0 mask.")
    vrf = ctx.get(VRF, record["vrf"]) if record.get("vrf") else None
    if enforce_unique(vrf, ctx):
        for other in sorted(ctx.all("ipam.prefix"), key=lambda r: r["id"]):
            same_table = other["id"] != record.get("id") and other.get("vrf") == record.get("vrf")
            if same_table and net(other["prefix"]) == prefix:
                message = f"Duplicate prefix found in {table_name(vrf)}: {other['prefix']}"
                raise ValidationFailed.on("prefix", message)


def range_name(record: Record) -> str:
    """IPRange.name: '10.0.0.10-20/24'."""
    sep = ":" if host(record["start_address"]).version == 6 else "."
    start, end = str(host(record["start_address"])).split(sep), str(host(record["end_address"])).split(sep)
    base = [a for a, b in zip(start, end, strict=False) if a == b]
    mask = ipaddress.ip_interface(record["start_address"]).network.prefixlen
    rest_start, rest_end = sep.join(start[len(base) :]), sep.join(end[len(base) :])
    return f"{sep.join(base)}{sep}{rest_start}-{rest_end}/{mask}"


def clean_range(record: Record, existing: Record | None, ctx: Ctx) -> None:
    start, end = (
        ipaddress.ip_interface(record["start_address"]),
        ipaddress.ip_interface(record["end_address"]),
    )
    if start.version != end.version:
        raise ValidationFailed.on("end_address", "Starting and ending IP address versions must match")
    if start.network.prefixlen != end.network.prefixlen:
        raise ValidationFailed.on("end_address", "Starting and ending IP address masks must match")
    if int(end.ip) < int(start.ip) or (end.ip == start.ip and not ctx.config.at_least("4.6.1")):
        message = f"Ending address must be greater than the starting address ({record['start_address']})"
        raise ValidationFailed.on("end_address", message)
    for other in ctx.all("ipam.iprange"):
        if other["id"] == record.get("id") or other.get("vrf") != record.get("vrf"):
            continue
        if ip_key(other["start_address"]) <= ip_key(str(end)) and ip_key(other["end_address"]) >= ip_key(
            str(start)
        ):
            vrf = ctx.get(VRF, record["vrf"]) if record.get("vrf") else None
            vrf_name = vrf["name"] if vrf else None
            raise ValidationFailed.model(
                f"Defined addresses overlap with range {range_name(other)} in VRF {vrf_name}"
            )


def clean_ip(record: Record, existing: Record | None, ctx: Ctx) -> None:
    address = ipaddress.ip_interface(record["address"])
    if address.network.prefixlen == 0:
        raise ValidationFailed.on("address", "Cannot create IP address with /0 mask.")
    vrf = ctx.get(VRF, record["vrf"]) if record.get("vrf") else None
    if enforce_unique(vrf, ctx):
        duplicates = sorted(
            (
                ip
                for ip in ctx.all("ipam.ipaddress")
                if ip["id"] != record.get("id")
                and ip.get("vrf") == record.get("vrf")
                and host(ip["address"]) == address.ip
            ),
            key=lambda ip: ip["id"],
        )
        if duplicates and (
            record.get("role") not in NONUNIQUE_ROLES
            or any(d.get("role") not in NONUNIQUE_ROLES for d in duplicates)
        ):
            message = f"Duplicate IP address found in {table_name(vrf)}: {duplicates[0]['address']}"
            raise ValidationFailed.on("address", message)
    for iprange in ctx.all("ipam.iprange"):
        populated = iprange.get("vrf") == record.get("vrf") and iprange.get("mark_populated")
        within = ip_key(iprange["start_address"]) <= ip_key(str(address)) <= ip_key(iprange["end_address"])
        if populated and within:
            message = f"Cannot create IP address {record['address']} inside range {range_name(iprange)}."
            raise ValidationFailed.on("address", message)
    moved_from = assignment_parent(ctx, existing) if existing is not None else None
    if moved_from is not None and moved_from != assignment_parent(ctx, record):
        parent = ctx.get(*moved_from)
        if parent is not None and parent.get(f"primary_ip{address.version}") == record.get("id"):
            raise ValidationFailed.model(
                "Cannot reassign IP address while it is designated as the primary IP for the parent object"
            )
    if record.get("status") == "slaac" and address.version != 6:
        raise ValidationFailed.on("status", "Only IPv6 addresses can be assigned SLAAC status")
    record["dns_name"] = record.get("dns_name", "").lower()


def ip_sort(attr: str) -> Any:
    def key(record: Record) -> tuple[int, int, int, int]:
        value = ipaddress.ip_interface(record[attr])
        return value.version, int(value.ip), value.network.prefixlen, record["id"]

    return key


def assigned_to(label: str, parent_field: str, parent_label: str) -> Filter:
    """device_id / virtual_machine_id on IP addresses: assigned to one of that object's interfaces."""

    def method(values: list[str], ctx: Ctx) -> Predicate:
        parents, _ = f.Related("", parent_label).ids(values, ctx)
        ids = {i["id"] for i in ctx.all(label) if i.get(parent_field) in parents}
        return lambda r: r.get("assigned_object_type") == label and r.get("assigned_object_id") in ids

    return f.Custom(method)


def searches(*attrs: str) -> Any:
    return lambda r, q: any(q.lower() in str(r.get(a) or "").lower() for a in attrs)


def is_net(value: str) -> bool:
    try:
        net(value)
    except ValueError:
        return False
    return True
