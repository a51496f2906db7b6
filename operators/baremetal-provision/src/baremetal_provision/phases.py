"""Where provisioning is and what to do next, decided from the BMC's facts and the durable marks (pure).

The reconcile observes, calls `decide`, carries out one action and observes again; being a pure function
of what is observed, the decision is the same after an operator restart, which is why a restart in the
middle of network booting does not power-cycle the server again: the network-boot mark says it happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from baremetal_provision import markers
from baremetal_provision.backends.base import SystemFacts

Phase = Literal[
    "PoweringOff", "NetworkBooting", "Installing", "Provisioned", "Failed", "Cleaning", "Deprovisioning"
]
Action = Literal[
    "power_off", "network_boot", "boot_from_disk", "power_on", "shut_down", "expire", "wait", "done"
]


@dataclass(frozen=True)
class Marks:
    """The durable marks of one instance (annotations)."""

    network_booted_at: datetime | None
    seed_fetched: bool
    called_back: bool
    cleaning_booted_at: datetime | None = None
    cleaned: bool = False

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> Marks:
        found = markers.annotations_of(meta)
        return cls(
            network_booted_at=markers.parse_time(found.get(markers.NETWORK_BOOTED)),
            seed_fetched=bool(found.get(markers.SEED_FETCHED)),
            called_back=bool(found.get(markers.CALLED_BACK)),
            cleaning_booted_at=markers.parse_time(found.get(markers.CLEANING_BOOTED)),
            cleaned=bool(found.get(markers.CLEANED)),
        )

    def deadline(self, timeout_seconds: int) -> datetime | None:
        if self.network_booted_at is None:
            return None
        return self.network_booted_at + timedelta(seconds=timeout_seconds)


@dataclass(frozen=True)
class Decision:
    phase: Phase
    action: Action


def decide(
    facts: SystemFacts,
    marks: Marks,
    *,
    timeout_seconds: int,
    now: datetime,
    online: bool = True,
    disk_requested: bool = False,
) -> Decision:
    """The phase the instance is in and the one action that moves it on.

    Once provisioned, the boot device is put back on disk (a "Once" override may stick on real BMCs, so
    it is made persistent) and the power follows `online`. `disk_requested` says the persistent disk
    boot was already requested in this pass and is taken as done: some BMCs report the new device only
    after the next cold start (virtualbmc) or never report an override as persistent, so asking again
    would loop. The next pass (the next reconcile) checks again.
    """
    if marks.called_back:
        if not disk_requested and (facts.boot_device != "disk" or facts.boot_override == "Once"):
            return Decision("Provisioned", "boot_from_disk")
        if online and facts.power_state == "Off":
            return Decision("Provisioned", "power_on")
        if not online and facts.power_state == "On":
            return Decision("Provisioned", "shut_down")
        return Decision("Provisioned", "done")
    deadline = marks.deadline(timeout_seconds)
    if deadline is None:
        if facts.power_state != "Off":
            return Decision("PoweringOff", "power_off")
        return Decision("NetworkBooting", "network_boot")
    if now >= deadline:
        if facts.power_state != "Off" or facts.boot_device == "pxe":
            return Decision("Failed", "expire")
        return Decision("Failed", "done")
    return Decision("Installing" if marks.seed_fetched else "NetworkBooting", "wait")


def remaining(marks: Marks, *, timeout_seconds: int, now: datetime) -> float | None:
    """Seconds until the provisioning deadline, when the server has been network-booted and not done."""
    deadline = marks.deadline(timeout_seconds)
    if deadline is None or marks.called_back:
        return None
    return (deadline - now).total_seconds()


def cleaning_expired(marks: Marks, *, timeout_seconds: int, now: datetime) -> bool:
    """The cleaner was network-booted and did not call back within `timeout_seconds`."""
    if marks.cleaning_booted_at is None or marks.cleaned:
        return False
    return now >= marks.cleaning_booted_at + timedelta(seconds=timeout_seconds)


def decide_deprovision(
    facts: SystemFacts,
    marks: Marks,
    *,
    clean: bool,
    timeout_seconds: int,
    now: datetime,
    disk_requested: bool = False,
) -> Decision:
    """The one action that moves a deleted instance on: network-boot the cleaner and wait for its
    callback (when `clean`, until `timeout_seconds` pass), then power off and put the boot device back
    on disk. The cleaning power cycle is marked like the installer's, so a restart never repeats it."""
    if clean and not marks.cleaned and not cleaning_expired(marks, timeout_seconds=timeout_seconds, now=now):
        if marks.cleaning_booted_at is not None:
            return Decision("Cleaning", "wait")
        if facts.power_state != "Off":
            return Decision("Cleaning", "power_off")
        return Decision("Cleaning", "network_boot")
    if facts.power_state != "Off":
        return Decision("Deprovisioning", "shut_down")
    if facts.boot_device != "disk" and not disk_requested:
        return Decision("Deprovisioning", "boot_from_disk")
    return Decision("Deprovisioning", "done")
