"""The sample reconcile: desired status from spec, written only when it differs; and a release that writes
to its object as it goes, as real deletion handlers do (only for Samples labelled with how many writes)."""

from collections.abc import Mapping, MutableMapping
from typing import Any

import kopf

from capfleet import conditions, events, pausing, statuses
from capfleet.kube import Kube
from capfleet.resources import Resource

RELEASE_WRITES_LABEL = "sample.capfleet.dev/release-writes"


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


async def release(kube: Kube, resource: Resource, body: Mapping[str, Any]) -> None:
    """Write `status.echo` as many times as the object's label says, each a step of the release."""
    meta = body["metadata"]
    writes = int((meta.get("labels") or {}).get(RELEASE_WRITES_LABEL) or 0)
    for step in range(writes):
        echo = {"echo": f"releasing, step {step + 1} of {writes}"}
        await kube.patch_status(resource, meta["name"], echo, meta.get("namespace"))
