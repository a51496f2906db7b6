"""List filters with NetBox's (django-filter's) semantics.

- Different parameters combine with AND; repeated values of one parameter with OR (`?id=1&id=2`), except
  tags, which must all be present (NetBox's TagFilter is "conjoined").
- Parameters NetBox does not know are ignored (netbox#19579: "Invalid filters are ignored").
- A value naming an object that does not exist is a 400, not an empty list: `?tag=nope` →
  `{"tag": ["Select a valid choice. nope is not one of the available choices."]}`.
- `cf_<name>` filters follow the custom field's filter_logic: exact, loose (icontains for text) or
  disabled (no filter, so the parameter is ignored).
- Any filter takes the `__n` (not) lookup; text filters also `__ic`, `__ie`, `__isw`, `__iew`, `__empty`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet_e2e.netbox.errors import FieldError, ValidationFailed
from capfleet_e2e.netbox.render import TAG, ApiContext
from capfleet_e2e.netbox.spec import Ctx, Filter, ModelSpec, Predicate, Record

RESERVED = {"limit", "offset", "start", "brief", "fields", "ordering", "format", "exclude", "omit"}
TEXT_LOOKUPS = {"ic", "ie", "isw", "iew", "empty", "nic", "nie"}
TRUE = ("true", "True", "1")


def invalid_choice(value: str) -> FieldError:
    return FieldError(f"Select a valid choice. {value} is not one of the available choices.")


def matches_text(lookup: str, actual: Any, wanted: str) -> bool:
    text = "" if actual is None else str(actual)
    if lookup == "exact":
        return text == wanted
    if lookup == "empty":
        return (text == "") == (wanted.lower() in ("true", "1"))
    lowered, wanted = text.lower(), wanted.lower()
    result = {
        "ic": wanted in lowered,
        "nic": wanted not in lowered,
        "ie": lowered == wanted,
        "nie": lowered != wanted,
        "isw": lowered.startswith(wanted),
        "iew": lowered.endswith(wanted),
    }
    return result[lookup]


@dataclass(frozen=True)
class Text:
    """MultiValueCharFilter on a record attribute."""

    attr: str
    lookup: str = "exact"

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        return lambda r: any(matches_text(self.lookup, r.get(self.attr), v) for v in values)


@dataclass(frozen=True)
class Number:
    """MultiValueNumberFilter."""

    attr: str

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        try:
            wanted = {int(v) for v in values}
        except ValueError:
            raise FieldError("Enter a number.") from None
        return lambda r: r.get(self.attr) in wanted


@dataclass(frozen=True)
class Boolean:
    attr: str

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        value = values[-1].lower()
        if value not in ("true", "false", "1", "0"):
            return lambda r: True
        wanted = value in ("true", "1")
        return lambda r: bool(r.get(self.attr)) == wanted


@dataclass(frozen=True)
class Related:
    """ModelMultipleChoiceFilter: an object by id (or slug/name) that must exist; `null` matches none."""

    attr: str
    label: str
    to_field: str = "id"

    def ids(self, values: list[str], ctx: Ctx) -> tuple[set[int], bool]:
        wanted: set[int] = set()
        null = False
        for value in values:
            if value == "null":
                null = True
                continue
            if self.to_field == "id" and not value.strip().isdigit():
                raise FieldError(f"“{value}” is not a valid value.")
            found = [r["id"] for r in ctx.all(self.label) if str(r.get(self.to_field)) == value.strip()]
            if not found:
                raise invalid_choice(value)
            wanted.update(found)
        return wanted, null

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        wanted, null = self.ids(values, ctx)
        return lambda r: r.get(self.attr) in wanted or (null and r.get(self.attr) is None)


@dataclass(frozen=True)
class Choice:
    """MultipleChoiceFilter (e.g. status)."""

    attr: str
    choices: tuple[tuple[str, str], ...]

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        known = dict(self.choices)
        for value in values:
            if value not in known:
                raise invalid_choice(value)
        return lambda r: r.get(self.attr) in values


@dataclass(frozen=True)
class Tags:
    """TagFilter: by slug (or id), every given tag must be on the object."""

    to_field: str = "slug"

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        wanted, _ = Related("tags", TAG, self.to_field).ids(values, ctx)
        return lambda r: wanted <= set(r.get("tags", []))


@dataclass(frozen=True)
class Custom:
    """A filter method: (values, ctx) → predicate."""

    method: Callable[[list[str], Ctx], Predicate]

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        return self.method(values, ctx)


@dataclass(frozen=True)
class CustomFieldFilter:
    """`cf_<name>`: exact or loose per the field's filter_logic, typed per the field's type."""

    name: str
    kind: str
    logic: str
    lookup: str = "exact"

    def build(self, values: list[str], ctx: Ctx) -> Predicate:
        def value(r: Record) -> Any:
            return r.get("custom_field_data", {}).get(self.name)

        if self.kind in ("integer", "decimal"):
            try:
                numbers = {float(v) for v in values}
            except ValueError:
                raise FieldError("Enter a number.") from None
            return lambda r: value(r) is not None and float(value(r)) in numbers
        if self.kind == "boolean":
            flags = {v.lower() in ("true", "1") for v in values}
            return lambda r: value(r) in flags
        lookup = self.lookup
        if lookup == "exact" and self.logic == "loose" and self.kind in ("text", "longtext", "url"):
            lookup = "ic"
        return lambda r: any(matches_text(lookup, value(r), v) for v in values)


def find_filter(spec: ModelSpec, name: str, ctx: ApiContext) -> Filter | None:
    """The filter a query parameter names, with its lookup applied; None if NetBox would ignore it."""
    base, _, lookup = name.rpartition("__") if "__" in name else (name, "", "")
    if lookup and lookup not in TEXT_LOOKUPS:
        return None
    found = builtin_filter(spec, base, ctx)
    if found is None or not lookup:
        return found
    if isinstance(found, Text | CustomFieldFilter):
        return dataclasses.replace(found, lookup=lookup)
    return None


def builtin_filter(spec: ModelSpec, name: str, ctx: ApiContext) -> Filter | None:
    if name in spec.filters:
        return spec.filters[name]
    if name == "id":
        return Number("id")
    if name == "q" and spec.search is not None:
        search = spec.search
        return Custom(lambda values, _: lambda r: all(search(r, v.strip()) for v in values if v.strip()))
    if name in ("tag", "tag_id") and spec.tags:
        return Tags("slug" if name == "tag" else "id")
    if name.startswith("cf_") and spec.custom_fields:
        for cf in ctx.custom_fields_for(spec.label):
            if cf["name"] == name[3:] and cf.get("filter_logic", "loose") != "disabled":
                return CustomFieldFilter(cf["name"], cf.get("type", "text"), cf.get("filter_logic", "loose"))
    return None


def negated(predicate: Predicate) -> Predicate:
    return lambda r: not predicate(r)


def apply_filters(
    spec: ModelSpec, query: Mapping[str, Sequence[str]], records: list[Record], ctx: ApiContext
) -> list[Record]:
    """The records matching every recognised filter in the query; a 400 for invalid filter values."""
    predicates: list[Predicate] = []
    errors: dict[str, list[str]] = {}
    for name, values in query.items():
        if name in RESERVED:
            continue
        negate = name.endswith("__n")
        found = find_filter(spec, name[:-3] if negate else name, ctx)
        if found is None:
            continue
        try:
            predicate = found.build(list(values), ctx)
        except FieldError as error:
            errors[name] = error.messages
            continue
        predicates.append(negated(predicate) if negate else predicate)
    if errors:
        raise ValidationFailed(errors)
    return [r for r in records if all(p(r) for p in predicates)]
