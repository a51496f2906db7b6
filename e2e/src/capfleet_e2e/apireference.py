"""The book's API reference (docs/reference/api.md), written from the CRDs in crds/ (pure functions).

The CRDs are generated from the pydantic models (`python -m capfleet.crdgen`), so they are what the API
server enforces: reading them, rather than the models, documents exactly what a user meets, including the
CEL rules admission checks and the printer columns `kubectl get` shows. `capfleet_e2e.book` writes the page
and fails its check when the page no longer matches crds/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Schema = Mapping[str, Any]
CRD_KIND = "CustomResourceDefinition"
OMITTED_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
"""The fields every object has (ObjectMeta's are Kubernetes'): not repeated for every kind."""


@dataclass(frozen=True)
class Crd:
    """One CustomResourceDefinition and the operator whose folder of crds/ it is in."""

    operator: str
    body: Schema

    @property
    def spec(self) -> Schema:
        spec: Schema = self.body["spec"]
        return spec

    @property
    def kind(self) -> str:
        return str(self.spec["names"]["kind"])

    @property
    def group(self) -> str:
        return str(self.spec["group"])

    @property
    def anchor(self) -> str:
        return self.kind.lower()


@dataclass(frozen=True)
class Field:
    """One row of a kind's field table."""

    path: str
    type: str
    required: bool
    default: str
    description: str
    validation: tuple[str, ...]


def load_crds(crds_dir: Path) -> list[Crd]:
    """Every CRD under crds/<operator>/, sorted by API group and kind."""
    found = []
    for path in sorted(crds_dir.glob("*/*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == CRD_KIND:
                found.append(Crd(path.parent.name, document))
    return sorted(found, key=lambda crd: (crd.group, crd.kind))


# Text in Markdown table cells.

_SPECIAL = re.compile(r"([\\*_\[\]|<>&])")
_ESCAPES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def _escape_text(text: str) -> str:
    return _SPECIAL.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def prose(text: str) -> str:
    """Text as Markdown: whitespace folded, HTML and Markdown characters escaped, `code` kept."""
    folded = " ".join(text.split())
    parts = folded.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: nothing is code
        return _escape_text(folded.replace("`", "'"))
    return "".join(_escape_text(p) if i % 2 == 0 else f"`{p}`" for i, p in enumerate(parts))


def code(text: object) -> str:
    """`text` as inline code, also in a table cell (Python-Markdown's tables split no code span at a
    pipe; a backtick in the text gets a longer fence)."""
    value = " ".join(str(text).split())
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def paragraphs(text: str) -> str:
    """A description of several paragraphs (blank-line separated), each folded and escaped."""
    return "\n\n".join(prose(p) for p in re.split(r"\n\s*\n", text.strip()) if p.strip())


# Schemas.


def type_of(schema: Schema) -> str:
    """The field's type as a reader says it: `[]string`, `map[string]integer`, `string (date-time)`."""
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = schema.get("type")
    if kind == "array":
        return "[]" + type_of(schema.get("items") or {})
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping):
            return "map[string]" + type_of(values)
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return "object (free-form)"
        return "object"
    if kind is None:
        return "any"
    return f"{kind} ({schema['format']})" if schema.get("format") else str(kind)


def _bounds(low: Any, high: Any, unit: str) -> str | None:
    if low is None and high is None:
        return None
    if low is not None and high is not None:
        return f"{unit} {low}-{high}" if low != high else f"{unit} exactly {low}"
    return f"{unit} ≥ {low}" if low is not None else f"{unit} ≤ {high}"


def transition_rule(rule: str) -> bool:
    """Whether a CEL rule compares with the old object: checked on update (immutable, or one-way)."""
    return "oldSelf" in rule


def validation_of(schema: Schema) -> tuple[str, ...]:
    """What admission checks of one field, in words."""
    found: list[str] = []
    if "enum" in schema:
        found.append("one of " + ", ".join(code(v) for v in schema["enum"]))
    if "pattern" in schema:
        found.append("matches " + code(schema["pattern"]))
    numeric = _bounds(schema.get("minimum"), schema.get("maximum"), "value")
    if numeric is not None:
        exclusive = [w for w in ("Minimum", "Maximum") if schema.get(f"exclusive{w}")]
        found.append(numeric + (" (exclusive)" if exclusive else ""))
    for key, unit in (("Length", "length"), ("Items", "items"), ("Properties", "entries")):
        bound = _bounds(schema.get(f"min{key}"), schema.get(f"max{key}"), unit)
        if bound is not None:
            found.append(bound)
    if schema.get("uniqueItems"):
        found.append("items unique")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = ", ".join(code(k) for k in schema.get("x-kubernetes-list-map-keys") or [])
        found.append(f"a map keyed by {keys}" if keys else "a map")
    elif list_type == "set":
        found.append("items unique (a set)")
    if schema.get("nullable"):
        found.append("may be null")
    for rule in schema.get("x-kubernetes-validations") or []:
        text = prose(rule["message"]) if rule.get("message") else code(rule["rule"])
        found.append(("on update: " if transition_rule(rule["rule"]) else "") + text)
    return tuple(found)


def default_of(schema: Schema) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    return code(value if isinstance(value, str) and value else json.dumps(value, separators=(",", ":")))


def children(schema: Schema) -> Iterator[tuple[str, Schema, set[str]]]:
    """The sub-schemas a field table goes into: an object's properties, a list's items (`[]`), a map's
    values (`[*]`); each with its path suffix and the names its object requires."""
    if schema.get("type") == "array" and isinstance(schema.get("items"), Mapping):
        yield "[]", schema["items"], set()
        return
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping) and values.get("properties"):
        yield "[*]", values, set()
    required = set(schema.get("required") or [])
    for name, sub in sorted((schema.get("properties") or {}).items()):
        yield f".{name}", sub, required


def fields(schema: Schema, path: str = "", required: bool = False) -> Iterator[Field]:
    """Every field under `schema`, depth first, properties in name order; list items and map values
    have no row of their own (their fields do, under `[]` and `[*]`)."""
    if path and not path.endswith(("[]", "[*]")):
        description = prose(schema.get("description", ""))
        yield Field(path, type_of(schema), required, default_of(schema), description, validation_of(schema))
    for suffix, sub, names in children(schema):
        yield from fields(sub, path + suffix, suffix.startswith(".") and suffix[1:] in names)


def root_fields(schema: Schema) -> list[Field]:
    required = set(schema.get("required") or [])
    found: list[Field] = []
    for name, sub in sorted((schema.get("properties") or {}).items()):
        if name not in OMITTED_ROOT_FIELDS:
            found += fields(sub, name, name in required)
    return found


def item_validation(schema: Schema) -> tuple[str, ...]:
    """The checks of a list's items or a map's values that have no rows of their own (scalars), shown on
    the list's or map's row as `each: ...`."""
    items = schema.get("items") if schema.get("type") == "array" else schema.get("additionalProperties")
    if not isinstance(items, Mapping) or items.get("properties"):
        return ()
    return tuple(f"each: {v}" for v in validation_of(items))


# The page.


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


def facts(crd: Crd, version: Schema) -> list[str]:
    names = crd.spec["names"]
    short = ", ".join(code(s) for s in names.get("shortNames") or []) or "none"
    categories = ", ".join(code(c) for c in names.get("categories") or []) or "none"
    subresources = ", ".join(sorted((version.get("subresources") or {}).keys())) or "none"
    rows = [
        ("API version", code(f"{crd.group}/{version['name']}")),
        ("Scope", str(crd.spec["scope"])),
        ("Plural, singular", f"{code(names['plural'])}, {code(names.get('singular', ''))}"),
        ("Short names", short),
        ("Categories", categories),
        ("Subresources", subresources),
        ("Operator", f"[{crd.operator}](../operators/{crd.operator}.md)"),
    ]
    return _table(("Property", "Value"), rows)


def printer_columns(version: Schema) -> list[str]:
    columns = version.get("additionalPrinterColumns") or []
    if not columns:
        return []
    rows = [
        (
            c["name"] + (" (wide)" if c.get("priority") else ""),
            c["type"],
            code(c["jsonPath"]),
            prose(c.get("description", "")),
        )
        for c in columns
    ]
    intro = "Columns of `kubectl get` (those marked wide only with `-o wide`):"
    return [intro, "", *_table(("Column", "Type", "JSONPath", "Description"), rows)]


def field_table(schema: Schema) -> list[str]:
    rows = []
    by_path = _schemas_by_path(schema)
    for found in root_fields(schema):
        checks = found.validation + item_validation(by_path.get(found.path, {}))
        rows.append(
            (
                code(found.path),
                code(found.type),
                "yes" if found.required else "",
                found.default,
                found.description,
                "; ".join(checks),
            )
        )
    return _table(("Field", "Type", "Required", "Default", "Description", "Validation"), rows)


def _schemas_by_path(schema: Schema, path: str = "") -> dict[str, Schema]:
    found: dict[str, Schema] = {path: schema} if path else {}
    for suffix, sub, _ in children(schema):
        found |= _schemas_by_path(sub, (path + suffix) if path else suffix.lstrip("."))
    return found


def update_rules(schema: Schema) -> list[str]:
    """The rules checked on update (immutable or one-way fields), as a list naming where each applies."""
    found = []
    for path, sub in _schemas_by_path(schema).items():
        for rule in sub.get("x-kubernetes-validations") or []:
            if transition_rule(rule["rule"]):
                found.append(f"- {code(path)}: {prose(rule.get('message') or rule['rule'])}")
    if not found:
        return []
    return ["Checked on every update (what cannot change, or changes one way only):", "", *found]


def kind_section(crd: Crd) -> list[str]:
    lines = [f"### {crd.kind} {{#{crd.anchor}}}", ""]
    versions = crd.spec["versions"]
    for version in versions:
        schema = version["schema"]["openAPIV3Schema"]
        if len(versions) > 1:
            lines += [f"#### {version['name']}", ""]
        lines += [paragraphs(schema.get("description", "")), "", *facts(crd, version), ""]
        columns = printer_columns(version)
        lines += [*columns, ""] if columns else []
        rules = update_rules(schema)
        lines += [*rules, ""] if rules else []
        lines += [*field_table(schema), ""]
    return lines


HEADER = """# API reference

<!-- Generated by `make book` (python -m capfleet_e2e.book generate) from crds/; do not edit. -->

Every kind capfleet defines, as its CustomResourceDefinition in `crds/` says, which is generated from the
pydantic models in `shared/src/capfleet/api` (`make crds`): what the API server accepts, defaults and
shows. Fields are listed by path (`[]` for the items of a list, `[*]` for the values of a map), `spec`
then `status`; every object also has `apiVersion`, `kind` and `metadata`. Validation is what admission
checks, including the CEL rules (`x-kubernetes-validations`) by their messages; rules "on update" compare
with the object as it was, which is how a field is made immutable. What a status condition's reason means
is in [Troubleshooting](../operate/troubleshooting.md).
"""


def group_anchor(group: str) -> str:
    return group.replace(".", "-")


def render(crds: Sequence[Crd]) -> str:
    groups: dict[str, list[Crd]] = {}
    for crd in crds:
        groups.setdefault(crd.group, []).append(crd)
    lines = [HEADER]
    lines += _table(
        ("API group", "Kinds"),
        [
            (
                f"[{code(group)}](#{group_anchor(group)})",
                ", ".join(f"[{c.kind}](#{c.anchor})" for c in found),
            )
            for group, found in groups.items()
        ],
    )
    lines.append("")
    for group, found in groups.items():
        lines += [f"## {group} {{#{group_anchor(group)}}}", ""]
        for crd in found:
            lines += kind_section(crd)
    return "\n".join(lines).rstrip() + "\n"
