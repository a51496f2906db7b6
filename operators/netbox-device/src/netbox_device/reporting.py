"""Writing a netbox-device object's status: conditions, NetBox's message on failure, Events on transitions.

Both kinds report the same way: the status is written right after the work (not left to kopf's patch),
only the keys that change are written, and a failure becomes Ready=False with the error's reason and
NetBox's own message before it is raised again for kopf to retry with the error's backoff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from capfleet import conditions, errors, events, pausing, statuses
from capfleet.conditions import Update
from capfleet.kube import Kube
from capfleet.resources import Resource


def status_with(body: Mapping[str, Any], fields: Mapping[str, Any], *updates: Update) -> dict[str, Any]:
    current = body.get("status") or {}
    generation = body["metadata"].get("generation")
    return {**fields, "conditions": statuses.with_conditions(current, updates, generation=generation)}


async def write_status(
    kube: Kube, resource: Resource, body: Mapping[str, Any], desired: Mapping[str, Any]
) -> None:
    changed = statuses.differences(body.get("status") or {}, desired)
    if changed:
        meta = body["metadata"]
        await kube.patch_status(resource, meta["name"], changed, meta["namespace"])


async def serve(
    kube: Kube,
    recorder: events.Recorder,
    resource: Resource,
    body: Mapping[str, Any],
    work: Awaitable[dict[str, Any]],
) -> None:
    """Await the reconcile `work` and write the status it returns, or the failure it raises."""
    try:
        desired = await work
    except errors.CapfleetError as exc:
        failed = status_with(
            body, {}, pausing.condition(False), Update.false(conditions.READY, exc.reason, exc.message)
        )
        await write_status(kube, resource, body, failed)
        await recorder.transition(body, "Warning", exc.reason, exc.message)
        raise
    await write_status(kube, resource, body, desired)
    ready = conditions.find(conditions.parse(desired["conditions"]), conditions.READY)
    if ready is not None:
        await recorder.transition(body, "Normal", ready.reason, ready.message)
