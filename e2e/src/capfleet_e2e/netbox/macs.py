"""MAC addresses before and after NetBox 4.2, for device interfaces and VM interfaces alike.

Before 4.2 a MAC is a plain writable `mac_address` field of the interface. From 4.2 MACs are objects in
/api/dcim/mac-addresses/ assigned to an interface (assigned_object_type/_id); the interface shows
`mac_addresses` (all of them) and `primary_mac_address` (writable, must be one of its own), and its
`mac_address` becomes a read-only copy of the primary MAC: writing it is silently ignored, as DRF ignores
read-only fields. A MAC that is some interface's primary cannot be reassigned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.errors import FieldError, ValidationFailed
from capfleet_e2e.netbox.fields import ContentType, Integer, MacAddress, Relation, normalize_mac
from capfleet_e2e.netbox.ipam_rules import common
from capfleet_e2e.netbox.rules import INTERFACE, PARENTS, VMINTERFACE
from capfleet_e2e.netbox.spec import ABSENT, Ctx, Field, Filter, ModelSpec, Predicate, Record

MAC = "dcim.macaddress"


def interface_mac_fields() -> tuple[Field, ...]:
    return (
        Field("mac_address", MacAddress(), read_only_since="4.2"),
        Field("primary_mac_address", Relation(MAC, on_delete="set_null"), since="4.2"),
    )


def macs_of(ctx: Ctx, label: str, pk: int) -> list[Record]:
    macs = [
        m
        for m in ctx.all(MAC)
        if m.get("assigned_object_type") == label and m.get("assigned_object_id") == pk
    ]
    return sorted(macs, key=lambda m: m["id"])


def interface_mac_computed(label: str) -> dict[str, Callable[[Record, Ctx], Any]]:
    """From 4.2: `mac_address` shows the primary MAC object; `mac_addresses` lists all assigned ones."""

    def mac_address(record: Record, ctx: Ctx) -> Any:
        if not ctx.config.mac_address_objects:
            return record.get("mac_address")
        primary = ctx.get(MAC, record["primary_mac_address"]) if record.get("primary_mac_address") else None
        return primary["mac_address"] if primary else None

    def mac_addresses(record: Record, ctx: Ctx) -> Any:
        if not ctx.config.mac_address_objects:
            return ABSENT
        return [ctx.brief(MAC, m) for m in macs_of(ctx, label, record["id"])]

    return {"mac_address": mac_address, "mac_addresses": mac_addresses}


def check_primary_mac(record: Record, ctx: Ctx, label: str) -> None:
    pk = record.get("primary_mac_address")
    if not pk or not ctx.config.mac_address_objects:
        return
    mac = ctx.get(MAC, pk)
    assert mac is not None
    if mac.get("assigned_object_type") != label or mac.get("assigned_object_id") != record.get("id"):
        raise ValidationFailed.on(
            "primary_mac_address", f"MAC address {mac['mac_address']} is not assigned to this interface."
        )


def interface_mac_filter(label: str) -> Filter:
    """`mac_address` on interfaces: the plain field before 4.2, any assigned MAC object from 4.2."""

    def method(values: list[str], ctx: Ctx) -> Predicate:
        wanted = set()
        for value in values:
            try:
                wanted.add(normalize_mac(value))
            except FieldError:
                continue
        if not ctx.config.mac_address_objects:
            return lambda r: r.get("mac_address") in wanted
        owners = {
            m["assigned_object_id"]
            for m in ctx.all(MAC)
            if m.get("assigned_object_type") == label and m["mac_address"] in wanted
        }
        return lambda r: r["id"] in owners

    return f.Custom(method)


def clean_mac(record: Record, existing: Record | None, ctx: Ctx) -> None:
    if (record.get("assigned_object_type") is None) != (record.get("assigned_object_id") is None):
        raise ValidationFailed.model(
            "Both assigned_object_type and assigned_object_id must be set, or neither."
        )
    if existing is None or existing.get("assigned_object_type") is None:
        return
    moved = (existing["assigned_object_type"], existing["assigned_object_id"]) != (
        record.get("assigned_object_type"),
        record.get("assigned_object_id"),
    )
    owner = ctx.get(existing["assigned_object_type"], existing["assigned_object_id"])
    if moved and owner is not None and owner.get("primary_mac_address") == record["id"]:
        raise ValidationFailed.model(
            "Cannot unassign MAC Address while it is designated as the primary MAC for an object"
        )


def on_parent(label: str) -> Filter:
    """device_id / virtual_machine_id on MAC addresses."""
    parent_field, parent_label = PARENTS[label]

    def method(values: list[str], ctx: Ctx) -> Predicate:
        parents, _ = f.Related("", parent_label).ids(values, ctx)
        ids = {i["id"] for i in ctx.all(label) if i.get(parent_field) in parents}
        return lambda r: r.get("assigned_object_type") == label and r.get("assigned_object_id") in ids

    return f.Custom(method)


def assigned_id(label: str) -> Filter:
    return f.Custom(
        lambda vs, ctx: (
            lambda r: r.get("assigned_object_type") == label and str(r.get("assigned_object_id")) in vs
        )
    )


MAC_SPEC = ModelSpec(
    label=MAC,
    path="dcim/mac-addresses",
    object_name="MACAddress",
    fields=(
        Field("mac_address", MacAddress(), required=True, nullable=False),
        Field("assigned_object_type", ContentType(frozenset({INTERFACE, VMINTERFACE}))),
        Field("assigned_object_id", Integer(min_value=0)),
        *common(),
    ),
    brief=("id", "url", "display", "mac_address", "description"),
    display=lambda r, ctx: r["mac_address"],
    filters={
        "mac_address": f.Custom(lambda vs, ctx: interface_mac_values(vs)),
        "assigned_object_type": f.Text("assigned_object_type"),
        "assigned_object_id": f.Number("assigned_object_id"),
        "interface_id": assigned_id(INTERFACE),
        "vminterface_id": assigned_id(VMINTERFACE),
        "device_id": on_parent(INTERFACE),
        "virtual_machine_id": on_parent(VMINTERFACE),
    },
    search=lambda r, q: q.upper() in r["mac_address"] or q.lower() in r.get("description", "").lower(),
    clean=clean_mac,
    computed={"assigned_object": lambda r, ctx: ctx.assigned_object(r)},
    ordering=lambda r: (r["mac_address"], r["id"]),
    min_version="4.2",
)


def interface_mac_values(values: list[str]) -> Predicate:
    wanted = set()
    for value in values:
        try:
            wanted.add(normalize_mac(value))
        except FieldError:
            continue
    return lambda r: r["mac_address"] in wanted
