"""A BaremetalInstance's status (phase, power state, conditions) and the Events on its transitions.

Conditions: `BMCReachable` (the BMC answered with these credentials), `Provisioned` (its reason is the
phase while provisioning, cleaning or deprovisioning runs, `RetryLimitExceeded` with the last failure
when every attempt failed) and
`Ready` summarising both, plus CAPI's `Paused`. Status is written through the kit's
`reconciling.Context.write_status`, so only the keys that change are written and an idle instance makes
no API writes.

The Events are the phases (reason = phase) and the errors (reason = the error's), posted here; Ready's
transitions post none (`contexts.Context.announce`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baremetal_provision import markers
from baremetal_provision.backends.base import PowerState
from baremetal_provision.contexts import INSTANCES, Context
from baremetal_provision.phases import Goal, Marks, Phase
from capfleet import conditions, errors, events, pausing
from capfleet.conditions import Update

BMC_REACHABLE = "BMCReachable"
PROVISIONED = "Provisioned"
STEPS = [BMC_REACHABLE, PROVISIONED]

MESSAGES: dict[Phase, str] = {
    "PoweringOff": "powering the server off before network booting",
    "NetworkBooting": "network booting the installer (one-time PXE boot, powered on)",
    "Installing": "the installer fetched its seed; waiting for its callback",
    "Provisioned": "deployed; the server boots from its disk",
    "Retrying": "the attempt failed; powering the server off before the next",
    "Failed": "every attempt failed; the server was powered off",
    "Cleaning": "deleting: the cleaner was network-booted; waiting for its callback",
    "Deprovisioning": "deleting: powering the server off and putting its boot device back on disk",
}


def phase_update(phase: Phase, marks: Marks, goal: Goal) -> Update:
    if phase == "Provisioned":
        return Update.true(PROVISIONED, "Deployed", MESSAGES[phase])
    if phase == "Failed":
        message = (
            f"{marks.failed_attempts} of {goal.max_attempts} attempts failed; the last: {marks.last_failure}"
        )
        return Update.false(PROVISIONED, "RetryLimitExceeded", message)
    if phase == "Retrying":
        message = (
            f"attempt {marks.attempts(goal)} of {goal.max_attempts} failed; powering off before retrying"
        )
        return Update.false(PROVISIONED, phase, message)
    return Update.false(PROVISIONED, phase, MESSAGES[phase])


def status_fields(phase: Phase, power: PowerState, marks: Marks, goal: Goal) -> dict[str, Any]:
    """The status fields rebuilt from the BMC's power state and the marks."""
    return {
        "phase": phase,
        "powerState": power,
        "provisioningAttempts": marks.attempts(goal) or None,
        "lastFailure": marks.last_failure,
    }


class InstanceStatus:
    """One instance's status during a reconcile, written at each phase it passes and remembering what it
    wrote.

    Not `reconciling.Recorder`, which writes once, at the end or at the failing step, against the body
    kopf gave it: a reconcile here may wait minutes for the power between phases, so each phase is
    written (and its Event posted) as it is reached, and each write is compared with the status written
    before it, not with kopf's stale body. Errors do not fail one step either: a BMC error is on
    `BMCReachable`, any other on `Ready` itself.
    """

    def __init__(self, ctx: Context, body: Mapping[str, Any]) -> None:
        self._ctx = ctx
        self._body = body

    async def _write(
        self, fields: Mapping[str, Any], updates: list[Update], ready_steps: list[str] | None = STEPS
    ) -> None:
        self._body = await self._ctx.write_status(INSTANCES, self._body, fields, updates, ready_steps)

    async def paused(self) -> None:
        await self._write({}, [pausing.condition(True)])

    async def detached(self) -> None:
        message = f"detached ({markers.DETACHED}): the BMC is left alone; remove the annotation to manage it"
        await self._write({}, [Update.false(BMC_REACHABLE, "Detached", message)])

    async def phase(self, phase: Phase, power: PowerState, marks: Marks, goal: Goal) -> None:
        update = phase_update(phase, marks, goal)
        connected = Update.true(BMC_REACHABLE, "Connected", "the BMC answered")
        fields = status_fields(phase, power, marks, goal)
        await self._write(fields, [pausing.condition(False), connected, update])
        kind: events.EventType = "Warning" if phase in {"Failed", "Retrying"} else "Normal"
        await self._ctx.recorder.transition(self._body, kind, phase, update.message)

    async def attempt_failed(self, failed: int, max_attempts: int, failure: str) -> None:
        """An Event per failed attempt, with its reason (the reason in the failure, `Reason: message`)."""
        reason = failure.split(":", 1)[0]
        message = f"attempt {failed} of {max_attempts} failed: {failure}"
        await self._ctx.recorder.transition(self._body, "Warning", reason, message)

    async def cleaning_timed_out(self, timeout_seconds: int) -> None:
        message = f"the cleaner did not call back within {timeout_seconds}s; deprovisioning without it"
        await self._ctx.recorder.transition(self._body, "Warning", "CleaningTimedOut", message)

    async def failed(self, exc: errors.CapfleetError) -> None:
        """Record an error: BMCReachable=False for BMC errors, else Ready=False with its reason."""
        if isinstance(exc, errors.BackendRejected | errors.BackendUnavailable):
            unreachable = Update.false(BMC_REACHABLE, exc.reason, exc.message)
            await self._write({}, [pausing.condition(False), unreachable])
        else:
            stopped = Update.false(conditions.READY, exc.reason, exc.message)
            await self._write({}, [pausing.condition(False), stopped], ready_steps=None)
        await self._ctx.recorder.transition(self._body, "Warning", exc.reason, exc.message)
