"""The sample reconcile: desired status from spec, written only when it differs."""

from collections.abc import Mapping, MutableMapping
from typing import Any

import kopf

from capfleet import conditions, events, pausing, statuses
from capfleet.kube import Kube


async def reconcile(
    kube: Kube,
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    patch: kopf.Patch,
) -> None:
    paused = pausing.annotated(meta)
    updates = [pausing.condition(paused)]
    desired: dict[str, Any] = {}
    if not paused:
        message = str(spec.get("message", ""))
        desired["echo"] = message
        updates.append(
            conditions.Update.true(conditions.READY, "Reconciled", f"echoed {len(message)} characters")
        )
    before = conditions.parse(status.get("conditions"))
    desired["conditions"] = statuses.with_conditions(status, updates, generation=meta.get("generation"))
    status_patch: MutableMapping[str, Any] = patch.status
    statuses.merge_into(status_patch, status, desired)
    for changed in statuses.transitions(before, conditions.parse(desired["conditions"])):
        await events.post(kube, body, "Normal", changed.reason, f"{changed.type} is {changed.status}")
