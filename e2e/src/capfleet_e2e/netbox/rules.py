"""Validation rules several models share: uniqueness, names, addresses, primary IPs.

Uniqueness errors keep NetBox's two shapes: a unique model field fails in the serializer under the
field's name ("<model> with this <field> already exists."), a multi-field UniqueConstraint fails in
full_clean() without a field (`__all__`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from capfleet_e2e.netbox.errors import ValidationFailed
from capfleet_e2e.netbox.spec import Ctx, Record

INTERFACE = "dcim.interface"
VMINTERFACE = "virtualization.vminterface"
IPADDRESS = "ipam.ipaddress"
PARENTS = {
    INTERFACE: ("device", "dcim.device"),
    VMINTERFACE: ("virtual_machine", "virtualization.virtualmachine"),
}


def unique_field(ctx: Ctx, label: str, record: Record, field: str, verbose: str) -> None:
    """A unique model field, e.g. a tag's slug: 'tag with this slug already exists.'"""
    value = record.get(field)
    if value in (None, ""):
        return
    if any(r[field] == value and r["id"] != record.get("id") for r in ctx.all(label)):
        raise ValidationFailed.on(field, f"{verbose} with this {field.replace('_', ' ')} already exists.")


def unique_together(
    ctx: Ctx, label: str, record: Record, fields: Sequence[str], message: str, *, casefold: str | None = None
) -> None:
    """A UniqueConstraint over several fields (NULLs never collide, as in PostgreSQL)."""

    def key(r: Record) -> tuple[Any, ...]:
        return tuple(str(r.get(f)).lower() if f == casefold else r.get(f) for f in fields)

    if any(record.get(f) is None for f in fields):
        return
    if any(key(r) == key(record) and r["id"] != record.get("id") for r in ctx.all(label)):
        raise ValidationFailed.model(message)


def family(version: int) -> dict[str, Any]:
    return {"value": version, "label": f"IPv{version}"}


def host(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address part of '10.0.0.5/24'."""
    return ipaddress.ip_interface(address).ip


def ip_key(address: str) -> tuple[int, int]:
    """A sort and comparison key for an address: family, then the address as a number."""
    ip = host(address)
    return ip.version, int(ip)


def assignment_parent(ctx: Ctx, record: Record) -> tuple[str, int] | None:
    """(label, id) of the device or VM whose interface an IP or MAC is assigned to."""
    label, pk = record.get("assigned_object_type"), record.get("assigned_object_id")
    if label not in PARENTS or pk is None:
        return None
    interface = ctx.get(label, pk)
    if interface is None:
        return None
    field, parent_label = PARENTS[label]
    return parent_label, interface[field]


def interface_ids(ctx: Ctx, interface_label: str, parent_field: str, parent_id: int) -> set[int]:
    return {i["id"] for i in ctx.all(interface_label) if i.get(parent_field) == parent_id}


def ips_on(ctx: Ctx, interface_label: str, ids: set[int]) -> list[Record]:
    """IP addresses assigned to any of these interfaces."""
    return [
        ip
        for ip in ctx.all(IPADDRESS)
        if ip.get("assigned_object_type") == interface_label and ip.get("assigned_object_id") in ids
    ]


def check_primary_ips(
    ctx: Ctx, record: Record, interface_label: str, parent_field: str, noun: str, fields: Sequence[str]
) -> None:
    """Device/VirtualMachine.clean(): a primary (or OOB) IP must belong to one of the object's interfaces."""
    ids = interface_ids(ctx, interface_label, parent_field, record.get("id", -1))
    own = {ip["id"] for ip in ips_on(ctx, interface_label, ids)}
    for field in fields:
        pk = record.get(field)
        if pk is None:
            continue
        ip = ctx.get(IPADDRESS, pk)
        assert ip is not None
        version = 6 if field.endswith("6") else 4 if field.endswith("4") else None
        if version is not None and host(ip["address"]).version != version:
            raise ValidationFailed.on(field, f"{ip['address']} is not an IPv{version} address.")
        nat = ctx.get(IPADDRESS, ip["nat_inside"]) if ip.get("nat_inside") else None
        if pk not in own and (nat is None or nat["id"] not in own):
            raise ValidationFailed.on(
                field, f"The specified IP address ({ip['address']}) is not assigned to this {noun}."
            )


def count_ipaddresses(label: str) -> Any:
    """An interface's count_ipaddresses."""

    def count(record: Record, ctx: Ctx) -> int:
        return sum(
            1
            for ip in ctx.all(IPADDRESS)
            if ip.get("assigned_object_type") == label and ip.get("assigned_object_id") == record["id"]
        )

    return count


def primary_ip(record: Record, ctx: Ctx) -> dict[str, Any] | None:
    """NetBox's primary_ip: IPv6 first unless PREFER_IPV4 (default off)."""
    pk = record.get("primary_ip6") or record.get("primary_ip4")
    ip = ctx.get(IPADDRESS, pk) if pk else None
    return ctx.brief(IPADDRESS, ip) if ip is not None else None
