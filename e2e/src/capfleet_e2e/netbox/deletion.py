"""Deleting objects with Django's on_delete semantics, as NetBox's models declare them.

- A foreign key declared PROTECT blocks the delete: 409 with the dependent objects named.
- CASCADE deletes the dependants (an interface with its device), SET_NULL clears the reference (a device's
  primary_ip4 when that IP is deleted).
- Generic relations cascade: deleting an interface deletes the IP addresses, MAC addresses and journal
  entries assigned to it, as NetBox's GenericRelations do. (So deleting a VM deletes its interfaces' IPs.)
"""

from __future__ import annotations

from capfleet_e2e.netbox.errors import detail
from capfleet_e2e.netbox.fields import Relation
from capfleet_e2e.netbox.render import ApiContext
from capfleet_e2e.netbox.spec import ModelSpec, Record

Target = tuple[str, int]


def dependants(ctx: ApiContext, label: str, pk: int) -> list[tuple[ModelSpec, Record, str]]:
    """(model, object, policy) of every object that refers to `label` #`pk`."""
    found: list[tuple[ModelSpec, Record, str]] = []
    for spec in ctx.registry.by_label.values():
        relations = [f for f in spec.fields if isinstance(f.kind, Relation) and f.kind.label == label]
        generic = spec.field("assigned_object_type") is not None
        if not relations and not generic:
            continue
        for record in ctx.db.all(spec.label):
            for field in relations:
                if record.get(field.name) == pk:
                    assert isinstance(field.kind, Relation)
                    found.append((spec, record, f"{field.kind.on_delete}:{field.name}"))
            if (
                generic
                and record.get("assigned_object_type") == label
                and record.get("assigned_object_id") == pk
            ):
                found.append((spec, record, "cascade:assigned_object"))
    return found


def collect(ctx: ApiContext, spec: ModelSpec, record: Record, doomed: dict[Target, ModelSpec]) -> None:
    """Add the object and everything that cascades from it to `doomed`."""
    key = (spec.label, record["id"])
    if key in doomed:
        return
    doomed[key] = spec
    for dep_spec, dep, policy in dependants(ctx, spec.label, record["id"]):
        if policy.startswith("cascade"):
            collect(ctx, dep_spec, dep, doomed)


def delete_objects(ctx: ApiContext, targets: list[tuple[ModelSpec, Record]]) -> None:
    """Delete the objects (all or none), cascading and clearing references; 409 if something protects them."""
    doomed: dict[Target, ModelSpec] = {}
    for spec, record in targets:
        collect(ctx, spec, record, doomed)
    protected: list[str] = []
    nulls: list[tuple[str, int, str]] = []
    for label, pk in doomed:
        for dep_spec, dep, policy in dependants(ctx, label, pk):
            if (dep_spec.label, dep["id"]) in doomed:
                continue
            action, _, field = policy.partition(":")
            if action == "protect":
                protected.append(f"{dep_spec.display(dep, ctx)} ({dep['id']})")
            elif action == "set_null":
                nulls.append((dep_spec.label, dep["id"], field))
    if protected:
        raise detail(
            409,
            f"Unable to delete object. {len(protected)} dependent objects were found: {', '.join(protected)}",
        )
    for label, pk, field in nulls:
        ctx.db.set_fields(label, pk, **{field: None})
    for label, pk in doomed:
        ctx.db.delete(label, pk)
