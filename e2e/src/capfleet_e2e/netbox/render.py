"""Turning stored records into NetBox's JSON: full and brief representations, URLs, tags, custom fields.

`ApiContext` is the per-request view of the database that fields, filters and model rules work with: it
knows the server's version and the absolute base URL the client used, since NetBox's `url` fields (which
pynetbox follows) are absolute.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from capfleet_e2e.netbox.config import ServerConfig
from capfleet_e2e.netbox.errors import not_found
from capfleet_e2e.netbox.spec import ABSENT, ModelSpec, Record, Registry
from capfleet_e2e.netbox.store import Database

TAG = "extras.tag"
CUSTOM_FIELD = "extras.customfield"
TAG_BRIEF = ("id", "url", "display_url", "display", "name", "slug", "color")


def timestamp(value: datetime | None) -> str | None:
    """DRF's rendering of a UTC datetime: ISO 8601 with a 'Z'."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def etag(record: Record) -> str:
    """NetBox 4.6's weak ETag: the object's last_updated (or created) timestamp."""
    stamp: datetime = record.get("last_updated") or record["created"]
    return f'W/"{stamp.isoformat()}"'


class ApiContext:
    """The database as one request sees it (implements spec.Ctx)."""

    def __init__(self, db: Database, registry: Registry, config: ServerConfig, base_url: str):
        self.db = db
        self.registry = registry
        self.config = config
        self.base_url = base_url.rstrip("/")

    def spec(self, label: str) -> ModelSpec:
        return self.registry.by_label[label]

    def get(self, label: str, pk: int) -> Record | None:
        return self.db.get(label, pk)

    def all(self, label: str) -> list[Record]:
        return self.db.all(label)

    def require(self, spec: ModelSpec, pk: int) -> Record:
        """The record, or NetBox's 404."""
        record = self.db.get(spec.label, pk)
        if record is None:
            raise not_found(spec.object_name)
        return record

    def custom_fields_for(self, label: str) -> list[Record]:
        """Custom field definitions that apply to a model, in NetBox's order (weight, name)."""
        fields = [cf for cf in self.db.all(CUSTOM_FIELD) if label in cf.get("object_types", [])]
        return sorted(fields, key=lambda cf: (cf.get("weight") or 100, cf["name"]))

    def url(self, spec: ModelSpec, pk: int) -> str:
        return f"{self.base_url}/api/{spec.path}/{pk}/"

    def brief(self, label: str, record: Record) -> dict[str, Any]:
        return self.render(self.spec(label), record, brief=True)

    def render(
        self, spec: ModelSpec, record: Record, *, brief: bool = False, only: list[str] | None = None
    ) -> dict[str, Any]:
        """The object as NetBox's serializer writes it (brief: its Meta.brief_fields)."""
        out: dict[str, Any] = {
            "id": record["id"],
            "url": self.url(spec, record["id"]),
            "display_url": f"{self.base_url}/{spec.path}/{record['id']}/",
            "display": spec.display(record, self),
        }
        wanted = set(only or (spec.brief if brief else ())) or None
        for field in spec.fields:
            if field.present(self.config) and (wanted is None or field.name in wanted):
                out[field.name] = field.kind.render(record.get(field.name), self)
        for name, compute in spec.computed.items():
            if wanted is None or name in wanted:
                value = compute(record, self)
                if value is not ABSENT:
                    out[name] = value
        if spec.tags:
            tags = [self.tag(pk) for pk in record.get("tags", []) if self.get(TAG, pk)]
            out["tags"] = sorted(tags, key=lambda tag: (tag["name"], tag["id"]))
        if spec.custom_fields:
            data = record.get("custom_field_data", {})
            out["custom_fields"] = {
                cf["name"]: data.get(cf["name"]) for cf in self.custom_fields_for(spec.label)
            }
        out["created"] = timestamp(record.get("created"))
        out["last_updated"] = timestamp(record.get("last_updated"))
        if wanted is not None:
            order = list(only or spec.brief)
            return {key: out[key] for key in order if key in out}
        return out

    def tag(self, pk: int) -> dict[str, Any]:
        record = self.get(TAG, pk)
        assert record is not None
        rendered = self.render(self.spec(TAG), record)
        return {key: rendered[key] for key in TAG_BRIEF}

    def assigned_object(self, record: Record) -> dict[str, Any] | None:
        """The brief form of the object a generic foreign key (assigned_object_type/_id) points to."""
        label, pk = record.get("assigned_object_type"), record.get("assigned_object_id")
        if not label or pk is None or label not in self.registry.by_label:
            return None
        target = self.get(label, pk)
        return self.brief(label, target) if target is not None else None
