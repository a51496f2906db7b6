"""Tenants, tags, custom fields and journal entries (NetBox's tenancy and extras apps).

Custom fields are the owner marks capfleet relies on, so they follow NetBox closely: `object_types` names
the models they apply to; `filter_logic` is loose by default (a `cf_<name>` filter then matches by
case-insensitive substring, so an owner "ns/a" would also match "ns/ab"); `exact` must be asked for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from capfleet_e2e.netbox import filters as f
from capfleet_e2e.netbox.errors import ValidationFailed
from capfleet_e2e.netbox.fields import (
    Anything,
    Boolean,
    Choice,
    ContentType,
    ContentTypes,
    Integer,
    Text,
    choices,
)
from capfleet_e2e.netbox.ipam_rules import common, searches
from capfleet_e2e.netbox.rules import unique_field
from capfleet_e2e.netbox.spec import Ctx, Field, ModelSpec, Record

CF_TYPES = choices(
    "text", "longtext", "integer", "decimal", "boolean", "date", "datetime", "url", "json", "select",
    "multiselect", "object", "multiobject",
)  # fmt: skip
FILTER_LOGIC = choices("disabled", "loose", "exact")
JOURNAL_KINDS = choices("info", "success", "warning", "danger")
JOURNALED = frozenset({
    "dcim.device", "dcim.interface", "dcim.site", "dcim.rack", "ipam.ipaddress", "ipam.prefix",
    "ipam.iprange", "ipam.vrf", "tenancy.tenant", "virtualization.virtualmachine",
    "virtualization.vminterface", "virtualization.cluster",
})  # fmt: skip


def name_and_slug(max_length: int = 100) -> tuple[Field, Field]:
    return (
        Field("name", Text(max_length=max_length, allow_blank=False), required=True, nullable=False),
        Field(
            "slug", Text(max_length=max_length, allow_blank=False, slug=True), required=True, nullable=False
        ),
    )


def unique_name_and_slug(label: str, verbose: str) -> Any:
    def clean(record: Record, existing: Record | None, ctx: Ctx) -> None:
        unique_field(ctx, label, record, "name", verbose)
        unique_field(ctx, label, record, "slug", verbose)

    return clean


def organizational(label: str, path: str, object_name: str, verbose: str, *extra: Field) -> ModelSpec:
    """A model like Tenant, Site or DeviceRole: name, slug, description, unique names and slugs."""
    return ModelSpec(
        label=label,
        path=path,
        object_name=object_name,
        fields=(*name_and_slug(), *extra, *common()),
        brief=("id", "url", "display", "name", "slug", "description"),
        display=lambda r, ctx: r["name"],
        filters={"name": f.Text("name"), "slug": f.Text("slug")},
        search=searches("name", "slug", "description"),
        clean=unique_name_and_slug(label, verbose),
        ordering=lambda r: (r["name"], r["id"]),
    )


TENANT_SPEC = organizational("tenancy.tenant", "tenancy/tenants", "Tenant", "tenant")

TAG_SPEC = ModelSpec(
    label="extras.tag",
    path="extras/tags",
    object_name="Tag",
    fields=(
        *name_and_slug(),
        Field("color", Text(max_length=6, regex=r"^[0-9a-f]{6}$"), nullable=False, default="9e9e9e"),
        Field("description", Text(max_length=200), nullable=False, default=""),
        Field("object_types", ContentTypes(), nullable=False, default=[]),
    ),
    brief=("id", "url", "display_url", "display", "name", "slug", "color", "description"),
    display=lambda r, ctx: r["name"],
    filters={"name": f.Text("name"), "slug": f.Text("slug")},
    search=searches("name", "slug", "description"),
    clean=unique_name_and_slug("extras.tag", "tag"),
    ordering=lambda r: (r["name"], r["id"]),
    custom_fields=False,
    tags=False,
)


def clean_custom_field(record: Record, existing: Record | None, ctx: Ctx) -> None:
    unique_field(ctx, "extras.customfield", record, "name", "custom field")
    if existing is not None and existing["name"] != record["name"]:
        raise ValidationFailed.on("name", "Custom field names cannot be changed once created.")


CUSTOM_FIELD_SPEC = ModelSpec(
    label="extras.customfield",
    path="extras/custom-fields",
    object_name="CustomField",
    fields=(
        Field("object_types", ContentTypes(), required=True, nullable=False),
        Field("type", Choice(CF_TYPES), nullable=False, default="text"),
        Field(
            "name",
            Text(
                max_length=50,
                allow_blank=False,
                regex=r"^(?!.*__)[a-zA-Z0-9_]+$",
                regex_message="Only alphanumeric characters and underscores are allowed.",
            ),
            required=True,
            nullable=False,
        ),
        Field("label", Text(max_length=50), nullable=False, default=""),
        Field("group_name", Text(max_length=50), nullable=False, default=""),
        Field("description", Text(max_length=200), nullable=False, default=""),
        Field("required", Boolean(), nullable=False, default=False),
        Field("unique", Boolean(), nullable=False, default=False),
        Field("filter_logic", Choice(FILTER_LOGIC), nullable=False, default="loose"),
        Field("default", Anything()),
        Field("weight", Integer(min_value=0), nullable=False, default=100),
        Field("validation_minimum", Integer()),
        Field("validation_maximum", Integer()),
        Field("validation_regex", Text(max_length=500), nullable=False, default=""),
    ),
    brief=("id", "url", "display", "name", "description"),
    display=lambda r, ctx: r["label"] or r["name"].replace("_", " ").capitalize(),
    filters={
        "name": f.Text("name"),
        "type": f.Choice("type", CF_TYPES),
        "filter_logic": f.Choice("filter_logic", FILTER_LOGIC),
        "object_type": f.Custom(lambda vs, ctx: lambda r: any(v in r["object_types"] for v in vs)),
    },
    search=searches("name", "label", "description"),
    clean=clean_custom_field,
    ordering=lambda r: (r["weight"], r["name"], r["id"]),
    custom_fields=False,
    tags=False,
)


def journal_display(record: Record, ctx: Ctx) -> str:
    created: datetime = record["created"]
    return f"{created:%Y-%m-%d %H:%M} ({dict(JOURNAL_KINDS)[record['kind']]})"


def clean_journal(record: Record, existing: Record | None, ctx: Ctx) -> None:
    target = ctx.get(record["assigned_object_type"], record["assigned_object_id"])
    if target is None:
        message = f"Related object not found using the provided numeric ID: {record['assigned_object_id']}"
        raise ValidationFailed.on("assigned_object_id", message)


JOURNAL_SPEC = ModelSpec(
    label="extras.journalentry",
    path="extras/journal-entries",
    object_name="JournalEntry",
    fields=(
        Field("assigned_object_type", ContentType(JOURNALED), required=True, nullable=False),
        Field("assigned_object_id", Integer(min_value=0), required=True, nullable=False),
        Field("kind", Choice(JOURNAL_KINDS), nullable=False, default="info"),
        Field("comments", Text(allow_blank=False), required=True, nullable=False),
    ),
    brief=("id", "url", "display", "created"),
    display=journal_display,
    filters={
        "assigned_object_type": f.Text("assigned_object_type"),
        "assigned_object_id": f.Number("assigned_object_id"),
        "kind": f.Choice("kind", JOURNAL_KINDS),
    },
    search=searches("comments"),
    clean=clean_journal,
    computed={"assigned_object": lambda r, ctx: ctx.assigned_object(r), "created_by": lambda r, ctx: None},
    ordering=lambda r: (-r["created"].timestamp(), -r["id"]),
)

SPECS = (TENANT_SPEC, TAG_SPEC, CUSTOM_FIELD_SPEC, JOURNAL_SPEC)
