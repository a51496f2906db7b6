"""Write status as a cache: only what differs, with conditions that keep their transition times.

An idle fleet must make no API writes, so a reconcile that finds nothing new must leave kopf's patch
empty. Handlers compute the whole desired status and hand it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from capfleet import conditions, events
from capfleet.api.base import Condition
from capfleet.kube import Kube
from capfleet.resources import Resource


def differences(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level status keys whose desired value differs from the current one."""
    return {key: value for key, value in desired.items() if current.get(key) != value}


def merge_into(
    patch_status: MutableMapping[str, Any], current: Mapping[str, Any], desired: Mapping[str, Any]
) -> None:
    """Put into kopf's `patch.status` only the keys that change."""
    for key, value in differences(current, desired).items():
        patch_status[key] = value


def with_conditions(
    current: Mapping[str, Any],
    updates: Iterable[conditions.Update],
    *,
    generation: int | None,
    ready_steps: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The wire form of `status.conditions` after `updates` (and, if `ready_steps`, a summarised Ready)."""
    result = conditions.apply_all(conditions.parse(current.get("conditions")), updates, generation=generation)
    if ready_steps is not None:
        result = conditions.apply(result, conditions.summarize(result, ready_steps), generation=generation)
    return conditions.to_wire(result)


def transitions(before: Iterable[Condition], after: Iterable[Condition]) -> list[Condition]:
    """Conditions whose status or reason changed: the moments worth an Event."""
    old = {c.type: (c.status, c.reason) for c in before}
    return [c for c in after if old.get(c.type) != (c.status, c.reason)]


async def write(
    kube: Kube,
    recorder: events.Recorder,
    resource: Resource,
    body: Mapping[str, Any],
    fields: Mapping[str, Any],
    updates: Iterable[conditions.Update],
    ready_steps: list[str] | None,
) -> dict[str, Any]:
    """Patch the status keys that change (conditions, with a summarised Ready when `ready_steps` are
    given) through the status subresource, and post an Event when Ready changes; return the desired status.

    For reconcilers that run outside kopf's patch cycle (daemons, loops) or must write mid-way.
    """
    meta = body["metadata"]
    current = body.get("status") or {}
    desired = {
        **fields,
        "conditions": with_conditions(
            current, updates, generation=meta.get("generation"), ready_steps=ready_steps
        ),
    }
    changed = differences(current, desired)
    if changed:
        await kube.patch_status(resource, meta["name"], changed, meta.get("namespace"))
    ready = conditions.find(conditions.parse(desired["conditions"]), conditions.READY)
    if ready is not None:
        if ready.status == "True":
            await recorder.transition(body, "Normal", ready.reason, ready.message)
        else:
            await recorder.transition(body, "Warning", ready.reason, ready.message)
    return desired
