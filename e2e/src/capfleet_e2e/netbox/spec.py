"""How a NetBox model is described to the test server: its endpoint, fields, filters and rules.

Each app module (ipam, extras, dcim, virtualization) declares its models with `ModelSpec`; the generic
views, serializers and filters in the other modules do the rest. The description mirrors NetBox's own
split: a model (fields, clean()), a serializer (which fields are writable, the brief representation) and a
filterset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from capfleet_e2e.netbox.config import ServerConfig

Record = dict[str, Any]
"""An object as stored: field values in internal form, relations as ids, plus id/created/last_updated."""


class Ctx(Protocol):
    """What fields, filters and rules may ask about the rest of the database and the request."""

    config: ServerConfig
    base_url: str

    def spec(self, label: str) -> ModelSpec: ...

    def get(self, label: str, pk: int) -> Record | None: ...

    def all(self, label: str) -> list[Record]: ...

    def brief(self, label: str, record: Record) -> dict[str, Any]: ...

    def assigned_object(self, record: Record) -> dict[str, Any] | None: ...


class Kind(Protocol):
    """A field type: how a JSON value becomes a stored value and back."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        """The stored value for `raw`; raises FieldError."""
        ...

    def render(self, value: Any, ctx: Ctx) -> Any: ...


@dataclass(frozen=True)
class Field:
    """A serializer field; `default` is the value stored when a create leaves it out.

    `since`: the NetBox version that added the field (absent before); `read_only_since`: the version from
    which writes to it are ignored, as DRF ignores read-only fields.
    """

    name: str
    kind: Kind
    required: bool = False
    read_only: bool = False
    nullable: bool = True
    default: Any = None
    since: str | None = None
    read_only_since: str | None = None

    def present(self, config: ServerConfig) -> bool:
        return self.since is None or config.at_least(self.since)

    def writable(self, config: ServerConfig) -> bool:
        if self.read_only or not self.present(config):
            return False
        return self.read_only_since is None or not config.at_least(self.read_only_since)


Predicate = Callable[[Record], bool]
ABSENT: Any = object()
"""What a computed field returns to be left out of the representation (e.g. a field of newer NetBox)."""


class Filter(Protocol):
    """A list filter: the query values of one parameter → a predicate; raises FieldError on bad values."""

    def build(self, values: list[str], ctx: Ctx) -> Predicate: ...


Clean = Callable[[Record, "Record | None", Ctx], None]
"""A model's clean(): the new state and the old one (None on create); raises ValidationFailed."""


@dataclass
class ModelSpec:
    """One NetBox model as the REST API exposes it."""

    label: str
    path: str
    object_name: str
    fields: tuple[Field, ...]
    brief: tuple[str, ...]
    display: Callable[[Record, Ctx], str]
    filters: dict[str, Filter] = field(default_factory=dict)
    search: Callable[[Record, str], bool] | None = None
    clean: Clean | None = None
    computed: dict[str, Callable[[Record, Ctx], Any]] = field(default_factory=dict)
    ordering: Callable[[Record], Any] = lambda record: record["id"]
    custom_fields: bool = True
    tags: bool = True
    min_version: str | None = None
    ip_lock: bool = False

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


class Registry:
    """All models the server knows, by label ("ipam.ipaddress") and by path ("ipam/ip-addresses")."""

    def __init__(self, specs: Iterable[ModelSpec]):
        self.by_label: dict[str, ModelSpec] = {}
        self.by_path: dict[str, ModelSpec] = {}
        for spec in specs:
            self.by_label[spec.label] = spec
            self.by_path[spec.path] = spec

    def enabled(self, config: ServerConfig) -> list[ModelSpec]:
        return [s for s in self.by_label.values() if s.min_version is None or config.at_least(s.min_version)]
