"""Field types of the test server's models, with NetBox's (DRF's) parsing rules and error messages.

Stored values are plain Python: strings, numbers, ids of related objects. Addresses are kept as NetBox
prints them ("10.0.0.5/24", compressed lower-case IPv6), MACs as NetBox 4 prints them (upper-case, colons).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from capfleet_e2e.netbox.errors import FieldError
from capfleet_e2e.netbox.spec import Ctx

NOT_DIRECT = 'Value must be passed directly (e.g. "foo": 123); do not use a dictionary or list.'
SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
MAC = re.compile(
    r"^([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})$"
)


@dataclass(frozen=True)
class Text:
    max_length: int | None = None
    allow_blank: bool = True
    slug: bool = False
    regex: str | None = None
    regex_message: str = "Enter a valid value."

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise FieldError("Not a valid string.")
        value = str(raw).strip()
        if value == "" and not self.allow_blank:
            raise FieldError("This field may not be blank.")
        if self.max_length is not None and len(value) > self.max_length:
            raise FieldError(f"Ensure this field has no more than {self.max_length} characters.")
        if self.slug and value and not SLUG.match(value):
            raise FieldError("Enter a valid “slug” consisting of letters, numbers, underscores or hyphens.")
        if self.regex and value and not re.match(self.regex, value):
            raise FieldError(self.regex_message)
        return value

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class Integer:
    min_value: int | None = None

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        try:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            value = int(str(raw).strip()) if not isinstance(raw, int | float) else int(raw)
        except ValueError:
            raise FieldError("A valid integer is required.") from None
        if self.min_value is not None and value < self.min_value:
            raise FieldError(f"Ensure this value is greater than or equal to {self.min_value}.")
        return value

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class Number:
    """A DecimalField (e.g. a VM's vcpus): NetBox renders it as a JSON number."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        try:
            if isinstance(raw, bool):
                raise InvalidOperation
            return float(Decimal(str(raw)))
        except InvalidOperation:
            raise FieldError("A valid number is required.") from None

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class Boolean:
    def parse(self, raw: Any, ctx: Ctx) -> Any:
        truthy = {True, "true", "True", "TRUE", "1", "yes", "on", "y", "t"}
        falsy = {False, "false", "False", "FALSE", "0", "no", "off", "n", "f"}
        if isinstance(raw, str | int | bool) and raw in truthy:
            return True
        if isinstance(raw, str | int | bool) and raw in falsy:
            return False
        raise FieldError("Must be a valid boolean.")

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class Choice:
    """NetBox's ChoiceField: written as the bare value, read as {"value": ..., "label": ...}."""

    choices: tuple[tuple[str, str], ...]
    allow_blank: bool = False

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        if isinstance(raw, dict | list):
            raise FieldError(NOT_DIRECT)
        if raw == "" and self.allow_blank:
            return ""
        if raw not in dict(self.choices):
            raise FieldError(f'"{raw}" is not a valid choice.')
        return raw

    def render(self, value: Any, ctx: Ctx) -> Any:
        if value in (None, ""):
            return None
        return {"value": value, "label": dict(self.choices).get(value, value)}


def choices(*values: str) -> tuple[tuple[str, str], ...]:
    """Choices whose labels are the title-cased values ("active" → "Active")."""
    return tuple((v, v.replace("-", " ").replace("_", " ").title()) for v in values)


@dataclass(frozen=True)
class Relation:
    """A foreign key, written as an id or a dict of attributes, read as the brief nested object.

    `on_delete` is what deleting the target does to this object: protect (409), cascade or set_null.
    """

    label: str
    on_delete: str = "protect"

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        return resolve(self.label, raw, ctx)["id"]

    def render(self, value: Any, ctx: Ctx) -> Any:
        record = ctx.get(self.label, value) if value is not None else None
        return ctx.brief(self.label, record) if record is not None else None


def resolve(label: str, raw: Any, ctx: Ctx) -> dict[str, Any]:
    """NetBox's get_related_object_by_attrs()."""
    if isinstance(raw, dict):
        matches = [r for r in ctx.all(label) if all(str(r.get(k)) == str(v) for k, v in raw.items())]
        if not matches:
            raise FieldError(f"Related object not found using the provided attributes: {raw}")
        if len(matches) > 1:
            raise FieldError(f"Multiple objects match the provided attributes: {raw}")
        return matches[0]
    try:
        if isinstance(raw, bool | float):
            raise ValueError
        pk = int(raw)
    except (TypeError, ValueError):
        raise FieldError(
            "Related objects must be referenced by numeric ID or by dictionary of attributes. "
            f"Received an unrecognized value: {raw}"
        ) from None
    record = ctx.get(label, pk)
    if record is None:
        raise FieldError(f"Related object not found using the provided numeric ID: {pk}")
    return record


@dataclass(frozen=True)
class IPInterface:
    """An address with its mask; a bare address gets /32 or /128, as netaddr.IPNetwork does."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        try:
            return str(ipaddress.ip_interface(str(raw).strip()))
        except ValueError:
            raise FieldError(f"Invalid IP address format: {raw}") from None

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class IPNetwork:
    """A prefix; host bits are cleared on save, as Prefix.save() does."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        try:
            return str(ipaddress.ip_network(str(raw).strip(), strict=False))
        except ValueError:
            raise FieldError(f"Invalid IP prefix format: {raw}") from None

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class ContentType:
    """An object type written and read as "<app_label>.<model>"."""

    allowed: frozenset[str]

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        if not isinstance(raw, str) or raw.count(".") != 1:
            raise FieldError("Invalid value. Specify a content type as '<app_label>.<model_name>'.")
        if raw not in self.allowed:
            raise FieldError(f"Invalid content type: {raw}")
        return raw

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


@dataclass(frozen=True)
class ContentTypes:
    """A list of object types (a custom field's object_types)."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        if not isinstance(raw, list) or not all(isinstance(v, str) and v.count(".") == 1 for v in raw):
            raise FieldError("Invalid value. Specify a content type as '<app_label>.<model_name>'.")
        return list(raw)

    def render(self, value: Any, ctx: Ctx) -> Any:
        return list(value)


@dataclass(frozen=True)
class MacAddress:
    def parse(self, raw: Any, ctx: Ctx) -> Any:
        return normalize_mac(raw)

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value


def normalize_mac(raw: Any) -> str:
    """'aa-bb-cc-dd-ee-ff' → 'AA:BB:CC:DD:EE:FF' (NetBox's mac_unix_expanded_uppercase)."""
    match = MAC.match(str(raw).strip().lower())
    if not match:
        raise FieldError(f"Invalid MAC address format: {raw}")
    return ":".join(match.groups()).upper()


@dataclass(frozen=True)
class Anything:
    """A JSON field (custom field defaults, local context data)."""

    def parse(self, raw: Any, ctx: Ctx) -> Any:
        return raw

    def render(self, value: Any, ctx: Ctx) -> Any:
        return value
