"""A BaremetalInstance's status (phase, power state, conditions) and the Events on its transitions.

Conditions: `BMCReachable` (the BMC answered with these credentials), `Provisioned` (its reason is the
phase while provisioning, cleaning or deprovisioning runs, `ProvisioningTimedOut` when it failed) and
`Ready` summarising both, plus CAPI's `Paused`. Status is written through the kit's
`reconciling.Context.write_status`, so only the keys that change are written and an idle instance makes
no API writes.

The Events are the phases (reason = phase) and the errors (reason = the error's), posted here; Ready's
transitions post none (`contexts.Context.announce`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baremetal_provision.backends.base import PowerState
from baremetal_provision.contexts import INSTANCES, Context
from baremetal_provision.phases import Phase
from capfleet import conditions, errors, events, pausing
from capfleet.conditions import Update

BMC_REACHABLE = "BMCReachable"
PROVISIONED = "Provisioned"
STEPS = [BMC_REACHABLE, PROVISIONED]

MESSAGES: dict[Phase, str] = {
    "PoweringOff": "powering the server off before network booting",
    "NetworkBooting": "network booting the installer (one-time PXE boot, powered on)",
    "Installing": "the installer fetched its seed; waiting for its callback",
    "Provisioned": "the installer called back; the boot device is back on disk",
    "Failed": "the installer did not call back in time; the server was powered off",
    "Cleaning": "deleting: the cleaner was network-booted; waiting for its callback",
    "Deprovisioning": "deleting: powering the server off and putting its boot device back on disk",
}


def phase_update(phase: Phase, timeout_seconds: int) -> Update:
    if phase == "Provisioned":
        return Update.true(PROVISIONED, "InstallerCalledBack", MESSAGES[phase])
    if phase == "Failed":
        message = f"no callback within {timeout_seconds}s; the server was powered off"
        return Update.false(PROVISIONED, "ProvisioningTimedOut", message)
    return Update.false(PROVISIONED, phase, MESSAGES[phase])


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
        written = await self._ctx.write_status(INSTANCES, self._body, fields, updates, ready_steps)
        self._body = {**self._body, "status": {**(self._body.get("status") or {}), **written}}

    async def paused(self) -> None:
        await self._write({}, [pausing.condition(True)])

    async def phase(self, phase: Phase, power: PowerState, timeout_seconds: int) -> None:
        update = phase_update(phase, timeout_seconds)
        connected = Update.true(BMC_REACHABLE, "Connected", "the BMC answered")
        fields = {"phase": phase, "powerState": power}
        await self._write(fields, [pausing.condition(False), connected, update])
        kind: events.EventType = "Warning" if phase == "Failed" else "Normal"
        await self._ctx.recorder.transition(self._body, kind, phase, update.message)

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
