"""Turning a POST/PUT/PATCH body into a record to store, with NetBox's validation and error shapes.

Order as in NetBox: every field is parsed and all field errors are reported together (DRF); then custom
fields and the model's clean() run (ValidatedModelSerializer.validate → full_clean()).
"""

from __future__ import annotations

import copy
import re
from datetime import date
from typing import Any

from capfleet_e2e.netbox.errors import FieldError, ValidationFailed
from capfleet_e2e.netbox.fields import resolve
from capfleet_e2e.netbox.render import TAG, ApiContext
from capfleet_e2e.netbox.spec import ModelSpec, Record


def build(spec: ModelSpec, data: Any, ctx: ApiContext, *, existing: Record | None, partial: bool) -> Record:
    """The record a write would store; raises ValidationFailed with DRF's field → messages errors."""
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise ValidationFailed(
            {"non_field_errors": [f"Invalid data. Expected a dictionary, but got {kind}."]}
        )
    record: Record = copy.deepcopy(existing) if existing is not None else {}
    errors: dict[str, list[str]] = {}
    for field in spec.fields:
        if not field.writable(ctx.config):
            if existing is None and field.present(ctx.config):
                record[field.name] = copy.deepcopy(field.default)
            continue
        if field.name not in data:
            if field.required and not partial:
                errors[field.name] = ["This field is required."]
            elif existing is None:
                record[field.name] = copy.deepcopy(field.default)
            continue
        raw = data[field.name]
        if raw is None:
            if field.nullable:
                record[field.name] = None
            else:
                errors[field.name] = ["This field may not be null."]
            continue
        try:
            record[field.name] = field.kind.parse(raw, ctx)
        except FieldError as error:
            errors[field.name] = error.messages
    if spec.tags:
        try:
            record["tags"] = tags_after(data, record.get("tags", []), ctx)
        except FieldError as error:
            errors["tags"] = error.messages
    if errors:
        raise ValidationFailed(errors)
    if spec.custom_fields:
        record["custom_field_data"] = custom_field_data(spec, data, existing, ctx)
    if spec.clean is not None:
        spec.clean(record, existing, ctx)
    return record


def tags_after(data: dict[str, Any], current: list[int], ctx: ApiContext) -> list[int]:
    """`tags` replaces the tags; from 4.6 `add_tags`/`remove_tags` change them without a read first."""
    partial = ctx.config.at_least("4.6") and ("add_tags" in data or "remove_tags" in data)
    if partial and "tags" in data:
        raise FieldError("Cannot specify tags together with add_tags or remove_tags.")
    if "tags" in data:
        return parse_tags(data["tags"], ctx)
    if not partial:
        return current
    removed = set(parse_tags(data.get("remove_tags", []), ctx))
    added = [t for t in parse_tags(data.get("add_tags", []), ctx) if t not in current]
    return [t for t in current if t not in removed] + [t for t in added if t not in removed]


def parse_tags(raw: Any, ctx: ApiContext) -> list[int]:
    if not isinstance(raw, list):
        raise FieldError(f'Expected a list of items but got type "{type(raw).__name__}".')
    ids: list[int] = []
    for item in raw:
        pk = resolve(TAG, item, ctx)["id"]
        if pk not in ids:
            ids.append(pk)
    return ids


def custom_field_data(spec: ModelSpec, data: dict[str, Any], existing: Record | None, ctx: ApiContext) -> Any:
    """Custom field values after a write: defaults on create, merged on update, then validated."""
    definitions = {cf["name"]: cf for cf in ctx.custom_fields_for(spec.label)}
    if existing is not None:
        values = dict(existing.get("custom_field_data", {}))
    else:
        values = {name: cf.get("default") for name, cf in definitions.items()}
    incoming = data.get("custom_fields", {})
    if not isinstance(incoming, dict):
        raise ValidationFailed.on(
            "custom_fields",
            "Invalid data format. Custom field data must be passed as a dictionary mapping field names to "
            "their values.",
        )
    for name, value in incoming.items():
        if name not in definitions:
            message = f"Unknown field name '{name}' in custom field data."
            if ctx.config.unknown_custom_fields == "reject-field":
                raise ValidationFailed.on("custom_fields", message)
            if ctx.config.unknown_custom_fields == "reject-model":
                raise ValidationFailed.model(message)
            continue
        values[name] = value
    for name, value in values.items():
        if name in definitions:
            problem = custom_value_problem(definitions[name], value)
            if problem:
                raise ValidationFailed.model(f"Invalid value for custom field '{name}': {problem}")
    return {name: value for name, value in values.items() if name in definitions}


def custom_value_problem(cf: Record, value: Any) -> str | None:
    """extras.models.CustomField.validate(), for the types capfleet uses."""
    if value in (None, ""):
        return "Required field cannot be empty." if cf.get("required") else None
    kind = cf.get("type", "text")
    if kind in ("text", "longtext", "url"):
        if not isinstance(value, str):
            return "Value must be a string."
        regex = cf.get("validation_regex") or ""
        if regex and not re.match(regex, value):
            return f"Values must match this regex: {regex}"
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return "Value must be an integer."
        if cf.get("validation_minimum") is not None and value < cf["validation_minimum"]:
            return f"Value must be at least {cf['validation_minimum']}"
        if cf.get("validation_maximum") is not None and value > cf["validation_maximum"]:
            return f"Value must not exceed {cf['validation_maximum']}"
    elif kind == "decimal" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "Value must be a decimal."
    elif kind == "boolean" and not isinstance(value, bool):
        return "Value must be true or false."
    elif kind == "date":
        try:
            date.fromisoformat(str(value))
        except ValueError:
            return "Date values must be in ISO 8601 format (YYYY-MM-DD)."
    return None
