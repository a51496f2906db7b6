"""Virtualization models: cluster types, clusters, virtual machines and their interfaces.

As in NetBox, a VM needs a site or a cluster, its name is unique per cluster (and tenant), its primary IPs
must sit on its own interfaces, and deleting it deletes its interfaces and every IP assigned to them: a
client that wants to keep IPs (say, from an IPAM pool) must unassign them first.
"""

from __future__ import annotations

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.errors import ValidationFailed
from capfleet_e2e.netbox.extras import organizational
from capfleet_e2e.netbox.fields import Anything, Boolean, Choice, Integer, Number, Relation, Text, choices
from capfleet_e2e.netbox.ipam_rules import TENANT, common, searches, tenancy_filters
from capfleet_e2e.netbox.macs import (
    check_primary_mac,
    interface_mac_computed,
    interface_mac_fields,
    interface_mac_filter,
)
from capfleet_e2e.netbox.rules import IPADDRESS, VMINTERFACE, check_primary_ips, count_ipaddresses, primary_ip
from capfleet_e2e.netbox.spec import Ctx, Field, ModelSpec, Record

CLUSTER, VM = "virtualization.cluster", "virtualization.virtualmachine"
CLUSTER_STATUS = choices("planned", "staging", "active", "decommissioning", "offline")
VM_STATUS = choices("offline", "active", "planned", "staged", "failed", "decommissioning")

CLUSTER_TYPE_SPEC = organizational(
    "virtualization.clustertype", "virtualization/cluster-types", "ClusterType", "cluster type"
)

CLUSTER_SPEC = ModelSpec(
    label=CLUSTER,
    path="virtualization/clusters",
    object_name="Cluster",
    fields=(
        Field("name", Text(max_length=100, allow_blank=False), required=True, nullable=False),
        Field("type", Relation("virtualization.clustertype"), required=True, nullable=False),
        Field("status", Choice(CLUSTER_STATUS), nullable=False, default="active"),
        Field("tenant", Relation(TENANT)),
        *common(),
    ),
    brief=("id", "url", "display", "name", "description"),
    display=lambda r, ctx: r["name"],
    filters={
        "name": f.Text("name"),
        "type_id": f.Related("type", "virtualization.clustertype"),
        "type": f.Related("type", "virtualization.clustertype", "slug"),
        "status": f.Choice("status", CLUSTER_STATUS),
        **tenancy_filters(),
    },
    search=searches("name", "description"),
    ordering=lambda r: (r["name"], r["id"]),
)


def clean_vm(record: Record, existing: Record | None, ctx: Ctx) -> None:
    if record.get("site") is None and record.get("cluster") is None:
        raise ValidationFailed.model("A virtual machine must be assigned to a site and/or cluster.")
    name = record["name"].lower()
    if record.get("cluster") is not None and any(
        r["id"] != record.get("id")
        and r["name"].lower() == name
        and (r.get("cluster"), r.get("tenant")) == (record["cluster"], record.get("tenant"))
        for r in ctx.all(VM)
    ):
        raise ValidationFailed.model("Virtual machine name must be unique per cluster.")
    check_primary_ips(ctx, record, VMINTERFACE, "virtual_machine", "VM", ("primary_ip4", "primary_ip6"))


VM_SPEC = ModelSpec(
    label=VM,
    path="virtualization/virtual-machines",
    object_name="VirtualMachine",
    fields=(
        Field("name", Text(max_length=64, allow_blank=False), required=True, nullable=False),
        Field("status", Choice(VM_STATUS), nullable=False, default="active"),
        Field("site", Relation("dcim.site")),
        Field("cluster", Relation(CLUSTER)),
        Field("role", Relation("dcim.devicerole")),
        Field("tenant", Relation(TENANT)),
        Field("primary_ip4", Relation(IPADDRESS, on_delete="set_null")),
        Field("primary_ip6", Relation(IPADDRESS, on_delete="set_null")),
        Field("vcpus", Number()),
        Field("memory", Integer(min_value=0)),
        Field("disk", Integer(min_value=0)),
        Field("serial", Text(max_length=50), nullable=False, default="", since="4.1"),
        Field("local_context_data", Anything()),
        *common(),
    ),
    brief=("id", "url", "display", "name", "description"),
    display=lambda r, ctx: r["name"],
    filters={
        "name": f.Text("name"),
        "status": f.Choice("status", VM_STATUS),
        "cluster_id": f.Related("cluster", CLUSTER),
        "cluster": f.Related("cluster", CLUSTER, "name"),
        "site_id": f.Related("site", "dcim.site"),
        "site": f.Related("site", "dcim.site", "slug"),
        "role_id": f.Related("role", "dcim.devicerole"),
        "role": f.Related("role", "dcim.devicerole", "slug"),
        **tenancy_filters(),
    },
    search=searches("name", "description"),
    clean=clean_vm,
    computed={
        "primary_ip": primary_ip,
        "interface_count": lambda r, ctx: sum(
            1 for i in ctx.all(VMINTERFACE) if i["virtual_machine"] == r["id"]
        ),
        "config_context": lambda r, ctx: {},
    },
    ordering=lambda r: (r["name"], r["id"]),
)


def clean_vm_interface(record: Record, existing: Record | None, ctx: Ctx) -> None:
    if any(
        r["id"] != record.get("id")
        and r["virtual_machine"] == record["virtual_machine"]
        and r["name"] == record["name"]
        for r in ctx.all(VMINTERFACE)
    ):
        raise ValidationFailed.model("Interface name must be unique per virtual machine.")
    check_primary_mac(record, ctx, VMINTERFACE)


VMINTERFACE_SPEC = ModelSpec(
    label=VMINTERFACE,
    path="virtualization/interfaces",
    object_name="VMInterface",
    fields=(
        Field("virtual_machine", Relation(VM, on_delete="cascade"), required=True, nullable=False),
        Field("name", Text(max_length=64, allow_blank=False), required=True, nullable=False),
        Field("enabled", Boolean(), nullable=False, default=True),
        Field("mtu", Integer(min_value=1)),
        *interface_mac_fields(),
        Field("description", Text(max_length=200), nullable=False, default=""),
    ),
    brief=("id", "url", "display", "virtual_machine", "name", "description"),
    display=lambda r, ctx: r["name"],
    filters={
        "virtual_machine_id": f.Related("virtual_machine", VM),
        "virtual_machine": f.Related("virtual_machine", VM, "name"),
        "name": f.Text("name"),
        "enabled": f.Boolean("enabled"),
        "mac_address": interface_mac_filter(VMINTERFACE),
    },
    search=searches("name", "description"),
    clean=clean_vm_interface,
    computed={"count_ipaddresses": count_ipaddresses(VMINTERFACE), **interface_mac_computed(VMINTERFACE)},
    ordering=lambda r: (r["virtual_machine"], r["name"], r["id"]),
)

SPECS = (CLUSTER_TYPE_SPEC, CLUSTER_SPEC, VM_SPEC, VMINTERFACE_SPEC)
