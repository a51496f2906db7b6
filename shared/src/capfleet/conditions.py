"""`metav1.Condition` lists: set one, keep its transition time, summarise many into Ready.

Every capfleet object reports progress through conditions, and the glue folds its children's conditions
into its own. These are pure functions over `capfleet.api.base.Condition` so that the rules (when
`lastTransitionTime` moves, which condition explains a not-ready object) are unit-tested in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from capfleet.api.base import Condition

READY = "Ready"
PAUSED = "Paused"

Status = Literal["True", "False", "Unknown"]


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(raw: Iterable[Mapping[str, Any]] | None) -> list[Condition]:
    """Conditions from an object's `status.conditions` (wire format)."""
    return [Condition.model_validate(item) for item in raw or ()]


def to_wire(conditions: Iterable[Condition]) -> list[dict[str, Any]]:
    return [c.model_dump(by_alias=True, exclude_none=True) for c in conditions]


def find(conditions: Iterable[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: Iterable[Condition], type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.status == "True"


@dataclass(frozen=True)
class Update:
    """What a step found: the values of one condition, without the bookkeeping fields."""

    type: str
    status: Status
    reason: str
    message: str = ""

    @classmethod
    def true(cls, type_: str, reason: str, message: str = "") -> Update:
        return cls(type_, "True", reason, message)

    @classmethod
    def false(cls, type_: str, reason: str, message: str = "") -> Update:
        return cls(type_, "False", reason, message)

    @classmethod
    def unknown(cls, type_: str, reason: str, message: str = "") -> Update:
        return cls(type_, "Unknown", reason, message)


def apply(
    conditions: Sequence[Condition],
    update: Update,
    *,
    generation: int | None,
    now: str | None = None,
) -> list[Condition]:
    """`conditions` with `update` applied: in place of a condition of the same type, else appended.

    `lastTransitionTime` changes only when the status changes, so repeating a reconcile with the same
    outcome yields an identical list (and no status write).
    """
    previous = find(conditions, update.type)
    transition = (
        previous.last_transition_time
        if previous is not None and previous.status == update.status
        else (now or now_rfc3339())
    )
    condition = Condition(
        type=update.type,
        status=update.status,
        reason=update.reason,
        message=update.message,
        last_transition_time=transition,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, condition]
    return [condition if c.type == update.type else c for c in conditions]


def apply_all(
    conditions: Sequence[Condition],
    updates: Iterable[Update],
    *,
    generation: int | None,
    now: str | None = None,
) -> list[Condition]:
    result = list(conditions)
    for update in updates:
        result = apply(result, update, generation=generation, now=now)
    return result


def remove(conditions: Sequence[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.type != type_]


def summarize(conditions: Sequence[Condition], steps: Sequence[str]) -> Update:
    """Ready from the step conditions, in the order the steps happen.

    The first step that is not True explains the object: its reason and message become Ready's, with the
    step named in front of the message, so a reader sees where and why the object is stuck. A missing
    step condition counts as Unknown (the step has not started).
    """
    for step in steps:
        found = find(conditions, step)
        if found is None:
            return Update.unknown(READY, "WaitingFor" + step, f"{step}: not started")
        if found.status != "True":
            message = f"{step}: {found.message}" if found.message else step
            return Update(READY, found.status, found.reason, message)
    return Update.true(READY, "Ready")


def instant(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def step_durations(conditions: Sequence[Condition], steps: Sequence[str], started: str) -> dict[str, int]:
    """How long each step that is True took, in seconds: from the moment the step before it became True
    (the first step: from `started`, the object's creation) to its own `lastTransitionTime`.

    A step's True condition keeps its transition time for as long as it stays True, so this answers
    "where did the time go" from the status alone. Steps that are not True, or carry no time, are left out.
    """
    durations: dict[str, int] = {}
    previous = instant(started)
    for step in steps:
        found = find(conditions, step)
        if found is None or found.status != "True" or not found.last_transition_time:
            continue
        done = instant(found.last_transition_time)
        durations[step] = max(0, int((done - previous).total_seconds()))
        previous = max(previous, done)
    return durations
