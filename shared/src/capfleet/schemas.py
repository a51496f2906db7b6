"""Turns pydantic's JSON Schema into the structural OpenAPI v3 schema a CRD must carry, and checks it.

pydantic writes JSON Schema 2020-12 (`$ref`/`$defs`, `anyOf` with null for optional fields, `const`,
`title`s), which the apiserver rejects or prunes badly. `capfleet.crdgen` calls `structural` for each
kind's spec and status; `problems` is the rule book the result must pass, used by crdgen before it
writes a file and by the unit tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

Schema = dict[str, Any]

# Keys a structural schema node may carry; anything else from pydantic is a mistake to fix in the model.
ALLOWED_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "x-kubernetes-validations",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
    }
)
DROPPED_KEYS = frozenset({"title", "examples", "$defs"})
VALIDATIONS = "x-kubernetes-validations"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
NULL = {"type": "null"}


class SchemaError(ValueError):
    """A model uses a JSON Schema construct with no structural equivalent."""


def structural(schema: Mapping[str, Any]) -> Schema:
    """The structural form of a pydantic `model_json_schema(by_alias=True)` result: every `$ref`
    inlined, optional fields unwrapped, free-form objects marked to keep unknown fields."""
    return _convert(schema, schema.get("$defs", {}), "")


def _merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> Schema:
    """`overlay` on top of `base`; CEL rules of both are kept (a field's rules add to its type's)."""
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = [*base.get(key, []), *value] if key == VALIDATIONS else value
    return merged


def _expand(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> Schema:
    """`node` with its `$ref`, `allOf` and nullable `anyOf` folded in, until none is left."""
    current = dict(node)
    while True:
        if "$ref" in current:
            ref = current.pop("$ref")
            name = ref.removeprefix("#/$defs/")
            if name not in defs:
                raise SchemaError(f"{path or '.'}: unresolvable reference {ref}")
            current = _merge(defs[name], current)
        elif "allOf" in current:
            parts = current.pop("allOf")
            base: Schema = {}
            for part in parts:
                base = _merge(base, part)
            current = _merge(base, current)
        elif "anyOf" in current:
            options = [option for option in current.pop("anyOf") if option != NULL]
            if len(options) != 1:
                raise SchemaError(f"{path or '.'}: a union of several types has no structural schema")
            current = _merge(options[0], current)
        else:
            return current


def _convert(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> Schema:  # noqa: C901 - one branch per JSON Schema keyword
    current = _expand(node, defs, path)
    for key in DROPPED_KEYS:
        current.pop(key, None)
    if "default" in current and current["default"] is None:
        del current["default"]
    if "const" in current:
        current.setdefault("enum", [current.pop("const")])
    if isinstance(current.get("type"), list):
        types = [t for t in current["type"] if t != "null"]
        if len(types) != 1:
            raise SchemaError(f"{path or '.'}: several types {types}")
        current["type"] = types[0]
    if "enum" in current and "type" not in current and all(isinstance(v, str) for v in current["enum"]):
        current["type"] = "string"

    if current.get("type") == "object":
        properties = current.get("properties")
        additional = current.pop("additionalProperties", None)
        if properties is not None:
            current["properties"] = {
                name: _convert(child, defs, f"{path}.{name}") for name, child in properties.items()
            }
        elif isinstance(additional, Mapping):
            current["additionalProperties"] = _convert(additional, defs, f"{path}.*")
        elif additional is not False:
            current[PRESERVE] = True
        if not current.get("required", True):
            del current["required"]
    if current.get("type") == "array" and "items" in current:
        current["items"] = _convert(current["items"], defs, f"{path}[*]")

    unknown = set(current) - ALLOWED_KEYS
    if unknown:
        raise SchemaError(f"{path or '.'}: keys with no structural equivalent: {sorted(unknown)}")
    return current


def walk(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every node of a structural schema with its path (`.spec.disks[*].name`, `.metadata.labels.*`)."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), Mapping):
        yield from walk(schema["items"], f"{path}[*]")


def problems(schema: Mapping[str, Any]) -> list[str]:  # noqa: C901 - one check per rule of structural schemas
    """What stops `schema` from being a structural schema the apiserver accepts; empty when it is."""
    found: list[str] = []
    for path, node in walk(schema):
        where = path or "."
        found += [
            f"{where}: forbidden key {key}"
            for key in ("$ref", "anyOf", "oneOf", "allOf", "not")
            if key in node
        ]
        found += [f"{where}: unknown key {key}" for key in sorted(set(node) - ALLOWED_KEYS)]
        if not node.get("type") and not node.get(PRESERVE):
            found.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            found.append(f"{where}: both properties and additionalProperties")
        shapeless = not ("properties" in node or "additionalProperties" in node or node.get(PRESERVE))
        # The root's metadata is the one shapeless object the apiserver fills in itself.
        if node.get("type") == "object" and shapeless and path != ".metadata":
            found.append(f"{where}: an object with no properties must preserve unknown fields")
        if node.get("x-kubernetes-list-type") == "map":
            items = node.get("items", {})
            for key in node.get("x-kubernetes-list-map-keys", []):
                item = items.get("properties", {}).get(key)
                if item is None:
                    found.append(f"{where}: list-map key {key} is not a property of the items")
                elif key not in items.get("required", []) and "default" not in item:
                    found.append(f"{where}: list-map key {key} must be required or defaulted")
        for rule in node.get(VALIDATIONS, []):
            if not rule.get("message"):
                found.append(f"{where}: CEL rule {rule.get('rule')!r} has no message")
    return found
