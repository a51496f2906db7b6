"""A BaremetalInstance's status (phase, power state, conditions) and the Events on its transitions.

Conditions: `BMCReachable` (the BMC answered with these credentials), `Provisioned` (its reason is the
phase while provisioning, cleaning or deprovisioning runs, `ProvisioningTimedOut` when it failed) and
`Ready` summarising both, plus CAPI's `Paused`. Only the keys that change are written, so an idle
instance makes no API writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baremetal_provision.backends.bmc import PowerState
from baremetal_provision.phases import Phase
from capfleet import conditions, errors, events, pausing, statuses
from capfleet.api import kinds
from capfleet.conditions import Update
from capfleet.kube import Kube

RESOURCE = kinds.BAREMETAL_INSTANCE.resource
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


def desired(body: Mapping[str, Any], fields: Mapping[str, Any], *updates: Update) -> dict[str, Any]:
    current = body.get("status") or {}
    generation = body["metadata"].get("generation")
    result = statuses.with_conditions(current, updates, generation=generation, ready_steps=STEPS)
    return {**fields, "conditions": result}


class Reporter:
    """Writes one instance's status during a reconcile, remembering what it wrote (the body is stale)."""

    def __init__(self, kube: Kube, recorder: events.Recorder, body: Mapping[str, Any]) -> None:
        self._kube = kube
        self._recorder = recorder
        self._body = body
        self._status: dict[str, Any] = dict(body.get("status") or {})

    def _current(self) -> dict[str, Any]:
        return {**self._body, "status": self._status}

    async def _write(self, wanted: Mapping[str, Any]) -> None:
        changed = statuses.differences(self._status, wanted)
        if changed:
            meta = self._body["metadata"]
            await self._kube.patch_status(RESOURCE, meta["name"], changed, meta["namespace"])
            self._status.update(changed)

    async def paused(self) -> None:
        await self._write(desired(self._current(), {}, pausing.condition(True)))

    async def phase(self, phase: Phase, power: PowerState, timeout_seconds: int) -> None:
        fields = {"phase": phase, "powerState": power}
        updates = (
            pausing.condition(False),
            Update.true(BMC_REACHABLE, "Connected", "the BMC answered"),
            phase_update(phase, timeout_seconds),
        )
        await self._write(desired(self._current(), fields, *updates))
        kind: events.EventType = "Warning" if phase == "Failed" else "Normal"
        await self._recorder.transition(self._body, kind, phase, phase_update(phase, timeout_seconds).message)

    async def cleaning_timed_out(self, timeout_seconds: int) -> None:
        message = f"the cleaner did not call back within {timeout_seconds}s; deprovisioning without it"
        await self._recorder.transition(self._body, "Warning", "CleaningTimedOut", message)

    async def failed(self, exc: errors.CapfleetError) -> None:
        """Record an error: BMCReachable=False for BMC errors, else Ready=False with its reason."""
        updates = [pausing.condition(False)]
        if isinstance(exc, errors.BackendRejected | errors.BackendUnavailable):
            updates.append(Update.false(BMC_REACHABLE, exc.reason, exc.message))
        wanted = desired(self._current(), {}, *updates)
        if not isinstance(exc, errors.BackendRejected | errors.BackendUnavailable):
            ready = conditions.apply(
                conditions.parse(wanted["conditions"]),
                Update.false(conditions.READY, exc.reason, exc.message),
                generation=self._body["metadata"].get("generation"),
            )
            wanted["conditions"] = conditions.to_wire(ready)
        await self._write(wanted)
        await self._recorder.transition(self._body, "Warning", exc.reason, exc.message)
