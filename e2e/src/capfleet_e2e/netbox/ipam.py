"""IPAM models as the REST API exposes them: VRFs, prefixes, IP ranges and IP addresses.

Validation and filter helpers live in ipam_rules, the available-ips views in available. IP address writes
take the same lock as available-ips, as NetBox ≥ 3.3.7 does with its advisory lock.
"""

from __future__ import annotations

import ipaddress

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.fields import (
    Boolean,
    Choice,
    ContentType,
    Integer,
    IPInterface,
    IPNetwork,
    Relation,
    Text,
    choices,
)
from capfleet_e2e.netbox.ipam_rules import (
    TENANT,
    VRF,
    address_in,
    assigned_to,
    clean_ip,
    clean_prefix,
    clean_range,
    common,
    contained_in,
    ip_sort,
    is_net,
    net,
    range_name,
    searches,
    tenancy_filters,
    vrf_filters,
)
from capfleet_e2e.netbox.rules import INTERFACE, VMINTERFACE, family, host, unique_field
from capfleet_e2e.netbox.spec import Field, ModelSpec

PREFIX_STATUS = choices("container", "active", "reserved", "deprecated")
RANGE_STATUS = choices("active", "reserved", "deprecated")
IP_STATUS = (*choices("active", "reserved", "deprecated"), ("dhcp", "DHCP"), ("slaac", "SLAAC"))
IP_ROLES = choices("loopback", "secondary", "anycast", "vip", "vrrp", "hsrp", "glbp", "carp")
DNS_NAME = r"^([0-9A-Za-z_-]+|\*)(\.[0-9A-Za-z_-]+)*\.?$"
DNS_MESSAGE = (
    "Only alphanumeric characters, asterisks, hyphens, periods, and underscores are allowed in DNS names"
)


VRF_SPEC = ModelSpec(
    label=VRF,
    path="ipam/vrfs",
    object_name="VRF",
    fields=(
        Field("name", Text(max_length=100, allow_blank=False), required=True),
        Field("rd", Text(max_length=21)),
        Field("tenant", Relation(TENANT)),
        Field("enforce_unique", Boolean(), nullable=False, default=True),
        *common(),
    ),
    brief=("id", "url", "display", "name", "rd", "description"),
    display=lambda r, ctx: r["name"],
    filters={"name": f.Text("name"), "rd": f.Text("rd"), **tenancy_filters()},
    search=searches("name", "rd", "description"),
    clean=lambda r, old, ctx: unique_field(ctx, VRF, r, "rd", "VRF"),
    ordering=lambda r: (r["name"], r.get("rd") or "", r["id"]),
)

PREFIX_SPEC = ModelSpec(
    label="ipam.prefix",
    path="ipam/prefixes",
    object_name="Prefix",
    fields=(
        Field("prefix", IPNetwork(), required=True, nullable=False),
        Field("vrf", Relation(VRF)),
        Field("tenant", Relation(TENANT)),
        Field("status", Choice(PREFIX_STATUS), nullable=False, default="active"),
        Field("is_pool", Boolean(), nullable=False, default=False),
        Field("mark_utilized", Boolean(), nullable=False, default=False),
        *common(),
    ),
    brief=("id", "url", "display", "family", "prefix", "description", "_depth"),
    display=lambda r, ctx: r["prefix"],
    filters={
        "prefix": f.Custom(
            lambda vs, ctx: lambda r: any(r["prefix"] == str(net(v)) for v in vs if is_net(v))
        ),
        "status": f.Choice("status", PREFIX_STATUS),
        "is_pool": f.Boolean("is_pool"),
        "family": f.Custom(lambda vs, ctx: lambda r: str(net(r["prefix"]).version) in vs),
        **vrf_filters(),
        **tenancy_filters(),
    },
    search=searches("prefix", "description"),
    clean=clean_prefix,
    computed={
        "family": lambda r, ctx: family(net(r["prefix"]).version),
        "children": lambda r, ctx: 0,
        "_depth": lambda r, ctx: 0,
    },
    ordering=lambda r: (
        r.get("vrf") is not None,
        r.get("vrf") or 0,
        net(r["prefix"]).version,
        int(net(r["prefix"]).network_address),
        net(r["prefix"]).prefixlen,
        r["id"],
    ),
)


IPRANGE_SPEC = ModelSpec(
    label="ipam.iprange",
    path="ipam/ip-ranges",
    object_name="IPRange",
    fields=(
        Field("start_address", IPInterface(), required=True, nullable=False),
        Field("end_address", IPInterface(), required=True, nullable=False),
        Field("vrf", Relation(VRF)),
        Field("tenant", Relation(TENANT)),
        Field("status", Choice(RANGE_STATUS), nullable=False, default="active"),
        Field("mark_populated", Boolean(), nullable=False, default=False, since="4.3"),
        Field("mark_utilized", Boolean(), nullable=False, default=False),
        *common(),
    ),
    brief=("id", "url", "display", "family", "start_address", "end_address", "description"),
    display=lambda r, ctx: range_name(r),
    filters={
        "start_address": f.Custom(lambda vs, ctx: address_in(vs, "start_address")),
        "end_address": f.Custom(lambda vs, ctx: address_in(vs, "end_address")),
        "parent": f.Custom(lambda vs, ctx: contained_in(vs, "start_address", "end_address")),
        "status": f.Choice("status", RANGE_STATUS),
        **vrf_filters(),
        **tenancy_filters(),
    },
    search=searches("start_address", "end_address", "description"),
    clean=clean_range,
    computed={
        "family": lambda r, ctx: family(host(r["start_address"]).version),
        "size": lambda r, ctx: int(host(r["end_address"])) - int(host(r["start_address"])) + 1,
    },
    ordering=lambda r: (r.get("vrf") is not None, r.get("vrf") or 0, *ip_sort("start_address")(r)),
)

IPADDRESS_SPEC = ModelSpec(
    label="ipam.ipaddress",
    path="ipam/ip-addresses",
    object_name="IPAddress",
    fields=(
        Field("address", IPInterface(), required=True, nullable=False),
        Field("vrf", Relation(VRF)),
        Field("tenant", Relation(TENANT)),
        Field("status", Choice(IP_STATUS), nullable=False, default="active"),
        Field("role", Choice(IP_ROLES, allow_blank=True), default=None),
        Field("assigned_object_type", ContentType(frozenset({INTERFACE, VMINTERFACE, "ipam.fhrpgroup"}))),
        Field("assigned_object_id", Integer(min_value=0)),
        Field("nat_inside", Relation("ipam.ipaddress", on_delete="set_null")),
        Field(
            "dns_name",
            Text(max_length=255, regex=DNS_NAME, regex_message=DNS_MESSAGE),
            nullable=False,
            default="",
        ),
        *common(),
    ),
    brief=("id", "url", "display", "family", "address", "description"),
    display=lambda r, ctx: r["address"],
    filters={
        "address": f.Custom(lambda vs, ctx: address_in(vs, "address")),
        "parent": f.Custom(lambda vs, ctx: contained_in(vs, "address")),
        "family": f.Custom(lambda vs, ctx: lambda r: str(host(r["address"]).version) in vs),
        "mask_length": f.Custom(
            lambda vs, ctx: lambda r: str(ipaddress.ip_interface(r["address"]).network.prefixlen) in vs
        ),
        "status": f.Choice("status", IP_STATUS),
        "role": f.Choice("role", IP_ROLES),
        "dns_name": f.Text("dns_name"),
        "description": f.Text("description"),
        "assigned_object_type": f.Text("assigned_object_type"),
        "assigned_object_id": f.Number("assigned_object_id"),
        "assigned": f.Custom(
            lambda vs, ctx: (
                lambda r: (r.get("assigned_object_id") is not None) == (vs[-1].lower() in ("true", "1"))
            )
        ),
        "interface_id": f.Custom(
            lambda vs, ctx: (
                lambda r: (
                    r.get("assigned_object_type") == INTERFACE and str(r.get("assigned_object_id")) in vs
                )
            )
        ),
        "vminterface_id": f.Custom(
            lambda vs, ctx: (
                lambda r: (
                    r.get("assigned_object_type") == VMINTERFACE and str(r.get("assigned_object_id")) in vs
                )
            )
        ),
        "device_id": assigned_to(INTERFACE, "device", "dcim.device"),
        "virtual_machine_id": assigned_to(VMINTERFACE, "virtual_machine", "virtualization.virtualmachine"),
        **vrf_filters(),
        **tenancy_filters(),
    },
    search=lambda r, q: (
        q.lower() in r.get("dns_name", "").lower()
        or q.lower() in r.get("description", "").lower()
        or r["address"].lower().startswith(q.lower())
    ),
    clean=clean_ip,
    computed={
        "family": lambda r, ctx: family(host(r["address"]).version),
        "assigned_object": lambda r, ctx: ctx.assigned_object(r),
        "nat_outside": lambda r, ctx: [
            ctx.brief("ipam.ipaddress", o)
            for o in ctx.all("ipam.ipaddress")
            if o.get("nat_inside") == r["id"]
        ],
    },
    ordering=ip_sort("address"),
    ip_lock=True,
)

SPECS = (VRF_SPEC, PREFIX_SPEC, IPRANGE_SPEC, IPADDRESS_SPEC)
