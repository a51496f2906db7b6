"""DCIM models: sites, racks, manufacturers, device types and roles, devices and their interfaces.

The parts netbox-device relies on follow NetBox closely: device filters by name, serial (case-insensitive,
as NetBox's iexact), status, role and site slugs, tenant, tags, has_oob_ip and custom fields; a device's
primary_ip4/6 and oob_ip must be assigned to one of its own interfaces; deleting a device deletes its
interfaces and, with them, the IP and MAC addresses assigned to those.
"""

from __future__ import annotations

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.errors import ValidationFailed
from capfleet_e2e.netbox.extras import organizational
from capfleet_e2e.netbox.fields import Anything, Boolean, Choice, Integer, Number, Relation, Text, choices
from capfleet_e2e.netbox.ipam_rules import TENANT, common, searches, tenancy_filters
from capfleet_e2e.netbox.macs import (
    MAC_SPEC,
    check_primary_mac,
    interface_mac_computed,
    interface_mac_fields,
    interface_mac_filter,
)
from capfleet_e2e.netbox.rules import (
    INTERFACE,
    IPADDRESS,
    check_primary_ips,
    count_ipaddresses,
    primary_ip,
    unique_together,
)
from capfleet_e2e.netbox.spec import Ctx, Field, ModelSpec, Record

SITE, RACK, DEVICE = "dcim.site", "dcim.rack", "dcim.device"
SITE_STATUS = choices("planned", "staging", "active", "decommissioning", "retired")
RACK_STATUS = choices("reserved", "available", "planned", "active", "deprecated")
DEVICE_STATUS = choices("offline", "active", "planned", "staged", "failed", "inventory", "decommissioning")
INTERFACE_TYPES = (
    ("virtual", "Virtual"), ("bridge", "Bridge"), ("lag", "Link Aggregation Group (LAG)"),
    ("100base-tx", "100BASE-TX (10/100ME)"), ("1000base-t", "1000BASE-T (1GE)"),
    ("2.5gbase-t", "2.5GBASE-T (2.5GE)"), ("10gbase-t", "10GBASE-T (10GE)"),
    ("10gbase-x-sfpp", "SFP+ (10GE)"), ("25gbase-x-sfp28", "SFP28 (25GE)"),
    ("40gbase-x-qsfpp", "QSFP+ (40GE)"), ("100gbase-x-qsfp28", "QSFP28 (100GE)"), ("other", "Other"),
)  # fmt: skip

SITE_SPEC = organizational(
    SITE, "dcim/sites", "Site", "site",
    Field("status", Choice(SITE_STATUS), nullable=False, default="active"),
    Field("tenant", Relation(TENANT)),
)  # fmt: skip
SITE_SPEC.filters.update({"status": f.Choice("status", SITE_STATUS), **tenancy_filters()})

MANUFACTURER_SPEC = organizational("dcim.manufacturer", "dcim/manufacturers", "Manufacturer", "manufacturer")

ROLE_SPEC = organizational(
    "dcim.devicerole", "dcim/device-roles", "DeviceRole", "device role",
    Field("color", Text(max_length=6), nullable=False, default="9e9e9e"),
    Field("vm_role", Boolean(), nullable=False, default=True),
)  # fmt: skip


def clean_device_type(record: Record, existing: Record | None, ctx: Ctx) -> None:
    message = "Device type model must be unique per manufacturer."
    unique_together(ctx, "dcim.devicetype", record, ("manufacturer", "model"), message, casefold="model")
    unique_together(ctx, "dcim.devicetype", record, ("manufacturer", "slug"), message)


DEVICE_TYPE_SPEC = ModelSpec(
    label="dcim.devicetype",
    path="dcim/device-types",
    object_name="DeviceType",
    fields=(
        Field("manufacturer", Relation("dcim.manufacturer"), required=True, nullable=False),
        Field("model", Text(max_length=100, allow_blank=False), required=True, nullable=False),
        Field("slug", Text(max_length=100, allow_blank=False, slug=True), required=True, nullable=False),
        Field("part_number", Text(max_length=50), nullable=False, default=""),
        Field("u_height", Number(), nullable=False, default=1.0),
        *common(),
    ),
    brief=("id", "url", "display", "manufacturer", "model", "slug", "description"),
    display=lambda r, ctx: r["model"],
    filters={
        "model": f.Text("model"),
        "slug": f.Text("slug"),
        "manufacturer_id": f.Related("manufacturer", "dcim.manufacturer"),
        "manufacturer": f.Related("manufacturer", "dcim.manufacturer", "slug"),
    },
    search=searches("model", "slug", "part_number"),
    clean=clean_device_type,
    ordering=lambda r: (r["manufacturer"], r["model"], r["id"]),
)


def clean_rack(record: Record, existing: Record | None, ctx: Ctx) -> None:
    unique_together(
        ctx, RACK, record, ("site", "name"), "Rack name must be unique per site.", casefold="name"
    )


RACK_SPEC = ModelSpec(
    label=RACK,
    path="dcim/racks",
    object_name="Rack",
    fields=(
        Field("name", Text(max_length=100, allow_blank=False), required=True, nullable=False),
        Field("site", Relation(SITE), required=True, nullable=False),
        Field("tenant", Relation(TENANT)),
        Field("status", Choice(RACK_STATUS), nullable=False, default="active"),
        Field("serial", Text(max_length=50), nullable=False, default=""),
        Field("u_height", Integer(min_value=1), nullable=False, default=42),
        *common(),
    ),
    brief=("id", "url", "display", "name", "description"),
    display=lambda r, ctx: r["name"],
    filters={
        "name": f.Text("name"),
        "site_id": f.Related("site", SITE),
        "site": f.Related("site", SITE, "slug"),
        "status": f.Choice("status", RACK_STATUS),
        **tenancy_filters(),
    },
    search=searches("name", "serial", "description"),
    clean=clean_rack,
    ordering=lambda r: (r["site"], r["name"], r["id"]),
)


def clean_device(record: Record, existing: Record | None, ctx: Ctx) -> None:
    rack = ctx.get(RACK, record["rack"]) if record.get("rack") else None
    if rack is not None and rack["site"] != record["site"]:
        site = ctx.get(SITE, record["site"])
        message = f"Rack {rack['name']} does not belong to site {site['name'] if site else record['site']}."
        raise ValidationFailed.on("rack", message)
    fields = ("primary_ip4", "primary_ip6", "oob_ip")
    check_primary_ips(ctx, record, INTERFACE, "device", "device", fields)
    name = (record.get("name") or "").lower()
    if name and any(
        r["id"] != record.get("id")
        and (r.get("name") or "").lower() == name
        and (r["site"], r.get("tenant")) == (record["site"], record.get("tenant"))
        for r in ctx.all(DEVICE)
    ):
        raise ValidationFailed.model("Device name must be unique per site.")


def device_display(record: Record, ctx: Ctx) -> str:
    if record.get("name"):
        return str(record["name"])
    device_type = ctx.get("dcim.devicetype", record["device_type"])
    return f"{device_type['model'] if device_type else 'Device'} ({record['id']})"


DEVICE_SPEC = ModelSpec(
    label=DEVICE,
    path="dcim/devices",
    object_name="Device",
    fields=(
        Field("name", Text(max_length=64)),
        Field("device_type", Relation("dcim.devicetype"), required=True, nullable=False),
        Field("role", Relation("dcim.devicerole"), required=True, nullable=False),
        Field("tenant", Relation(TENANT)),
        Field("serial", Text(max_length=50), nullable=False, default=""),
        Field("asset_tag", Text(max_length=50)),
        Field("site", Relation(SITE), required=True, nullable=False),
        Field("rack", Relation(RACK)),
        Field("position", Number()),
        Field("face", Choice(choices("front", "rear"), allow_blank=True), default=""),
        Field("status", Choice(DEVICE_STATUS), nullable=False, default="active"),
        Field("primary_ip4", Relation(IPADDRESS, on_delete="set_null")),
        Field("primary_ip6", Relation(IPADDRESS, on_delete="set_null")),
        Field("oob_ip", Relation(IPADDRESS, on_delete="set_null")),
        Field("cluster", Relation("virtualization.cluster", on_delete="set_null")),
        Field("local_context_data", Anything()),
        *common(),
    ),
    brief=("id", "url", "display", "name", "description"),
    display=device_display,
    filters={
        "name": f.Text("name"),
        "serial": f.Custom(lambda vs, ctx: lambda r: any(v.lower() == r["serial"].lower() for v in vs)),
        "asset_tag": f.Text("asset_tag"),
        "status": f.Choice("status", DEVICE_STATUS),
        "role_id": f.Related("role", "dcim.devicerole"),
        "role": f.Related("role", "dcim.devicerole", "slug"),
        "site_id": f.Related("site", SITE),
        "site": f.Related("site", SITE, "slug"),
        "rack_id": f.Related("rack", RACK),
        "device_type_id": f.Related("device_type", "dcim.devicetype"),
        "cluster_id": f.Related("cluster", "virtualization.cluster"),
        "has_oob_ip": f.Custom(lambda vs, ctx: lambda r: (r.get("oob_ip") is not None) == (vs[-1] in f.TRUE)),
        "has_primary_ip": f.Custom(
            lambda vs, ctx: lambda r: bool(r.get("primary_ip4") or r.get("primary_ip6")) == (vs[-1] in f.TRUE)
        ),
        **tenancy_filters(),
    },
    search=searches("name", "serial", "asset_tag", "description"),
    clean=clean_device,
    computed={
        "primary_ip": primary_ip,
        "interface_count": lambda r, ctx: sum(1 for i in ctx.all(INTERFACE) if i["device"] == r["id"]),
        "config_context": lambda r, ctx: {},
    },
    ordering=lambda r: (r.get("name") or "", r["id"]),
)


def clean_interface(record: Record, existing: Record | None, ctx: Ctx) -> None:
    unique_together(ctx, INTERFACE, record, ("device", "name"), "Interface name must be unique per device.")
    check_primary_mac(record, ctx, INTERFACE)


INTERFACE_SPEC = ModelSpec(
    label=INTERFACE,
    path="dcim/interfaces",
    object_name="Interface",
    fields=(
        Field("device", Relation(DEVICE, on_delete="cascade"), required=True, nullable=False),
        Field("name", Text(max_length=64, allow_blank=False), required=True, nullable=False),
        Field("label", Text(max_length=64), nullable=False, default=""),
        Field("type", Choice(INTERFACE_TYPES), required=True, nullable=False),
        Field("enabled", Boolean(), nullable=False, default=True),
        Field("mtu", Integer(min_value=1)),
        *interface_mac_fields(),
        Field("mgmt_only", Boolean(), nullable=False, default=False),
        Field("description", Text(max_length=200), nullable=False, default=""),
    ),
    brief=("id", "url", "display", "device", "name", "description", "cable", "_occupied"),
    display=lambda r, ctx: r["name"],
    filters={
        "device_id": f.Related("device", DEVICE),
        "device": f.Related("device", DEVICE, "name"),
        "name": f.Text("name"),
        "type": f.Choice("type", INTERFACE_TYPES),
        "mgmt_only": f.Boolean("mgmt_only"),
        "enabled": f.Boolean("enabled"),
        "mac_address": interface_mac_filter(INTERFACE),
    },
    search=searches("name", "label", "description"),
    clean=clean_interface,
    computed={
        "cable": lambda r, ctx: None,
        "_occupied": lambda r, ctx: False,
        "count_ipaddresses": count_ipaddresses(INTERFACE),
        **interface_mac_computed(INTERFACE),
    },
    ordering=lambda r: (r["device"], r["name"], r["id"]),
)

SPECS = (
    SITE_SPEC,
    MANUFACTURER_SPEC,
    ROLE_SPEC,
    DEVICE_TYPE_SPEC,
    RACK_SPEC,
    DEVICE_SPEC,
    INTERFACE_SPEC,
    MAC_SPEC,
)
