"""Write status as a cache: only what differs, with conditions that keep their transition times.

An idle fleet must make no API writes, so a reconcile that finds nothing new must leave kopf's patch
empty. These are the pure parts; `capfleet.reconciling` writes what they compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from capfleet import conditions
from capfleet.api.base import Condition


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


def phase_of(body: Mapping[str, Any]) -> str:
    """The one word a dashboard counts an object under: its `status.phase` where the kind has one, else
    `Ready` when Ready is True, else Ready's reason (the step it waits for or the failure that stops it),
    `Pending` while nothing has been written."""
    status = body.get("status") or {}
    if isinstance(status.get("phase"), str) and status["phase"]:
        return str(status["phase"])
    # Read from the wire form, not parsed: a watch event may carry any object, valid or not.
    found = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
    ready = next((c for c in found if c.get("type") == conditions.READY), None)
    if ready is None:
        return "Pending"
    return conditions.READY if ready.get("status") == "True" else str(ready.get("reason") or "NotReady")


def steps_done(
    before: Iterable[Condition], after: Sequence[Condition], steps: Sequence[str], created: str
) -> dict[str, int]:
    """The steps that became True between `before` and `after`, with how long each took
    (`conditions.step_durations`): what a reconcile has just finished, timed once."""
    was_true = {c.type for c in before if c.status == "True"}
    took = conditions.step_durations(after, steps, created)
    return {step: seconds for step, seconds in took.items() if step not in was_true}


def transitions(before: Iterable[Condition], after: Iterable[Condition]) -> list[Condition]:
    """Conditions whose status or reason changed: the moments worth an Event."""
    old = {c.type: (c.status, c.reason) for c in before}
    return [c for c in after if old.get(c.type) != (c.status, c.reason)]
