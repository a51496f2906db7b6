"""Putting a controller's finalizer on an object and taking it off: the engine's only writes of its own.

The finalizer goes on before the first reconcile of an object that will hold something outside, as a
merge patch of the whole list carrying the object's resourceVersion: a list someone changed meanwhile is
a conflict, retried, never overwritten. It comes off once finalize has nothing left to wait for, by value:
a JSON patch that tests the entry at its index and removes it. Finalize has usually written to the object
by then (a status, a let-go mark), so the resourceVersion read before it is stale; refused, the removal
reads the object and tries once more rather than running finalize again, whose give-back may no longer be
possible (a Secret's RoleBinding already let go of).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import errors, kube
from capfleet.resources import Resource

Obj = Mapping[str, Any]


def finalizers_of(obj: Obj) -> list[str]:
    return list(obj["metadata"].get("finalizers") or [])


def is_deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def removal(finalizers: list[str], finalizer: str) -> list[dict[str, Any]]:
    """The JSON patch that removes `finalizer` from a list that reads `finalizers` (none if absent): a
    test of its index first, so a list changed meanwhile is refused rather than losing another entry."""
    if finalizer not in finalizers:
        return []
    path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
    return [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]


async def add(api: kube.Kube, resource: Resource, obj: Obj, finalizer: str) -> Obj:
    """`obj` with `finalizer` added, as the API server answered."""
    meta = obj["metadata"]
    patch = {
        "metadata": {
            "finalizers": [*finalizers_of(obj), finalizer],
            "resourceVersion": meta["resourceVersion"],
        }
    }
    answer = await api.patch(resource, meta["name"], patch, meta.get("namespace"))
    if answer is None:
        raise errors.Waiting(f"{resource.kind} {meta['name']} is gone")
    return answer


async def remove(api: kube.Kube, resource: Resource, obj: Obj, finalizer: str) -> Obj | None:
    """`obj` without `finalizer`, as the API server answered; None once the object is gone."""
    meta = obj["metadata"]
    for attempt in range(2):
        operations = removal(finalizers_of(obj), finalizer)
        if not operations:
            return obj
        try:
            return await api.json_patch(resource, meta["name"], operations, meta.get("namespace"))
        except kube.Invalid:
            if attempt:
                raise
        current = await api.get(resource, meta["name"], meta.get("namespace"))
        if current is None:
            return None
        obj = current
    return obj
