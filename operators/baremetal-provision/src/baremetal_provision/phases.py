"""Where provisioning is and what to do next, decided from the BMC's facts and the durable marks (pure).

The reconcile observes, calls `decide`, carries out one action and observes again; being a pure function
of what is observed, the decision is the same after an operator restart, which is why a restart in the
middle of network booting does not power-cycle the server again: the network-boot mark says it happened.

A deployment that fails (the deploy ramdisk reports why) or times out is one attempt: the server is
powered off, the attempt counted and its marks cleared in one write, and the next attempt network-boots
again, until `maxProvisioningAttempts` have failed (Failed, RetryLimitExceeded). BMC errors are not
attempts: they raise and are retried without end. An image deployment ends in a power cycle onto the disk
(the ramdisk powers off; the first boot from disk is marked so that it happens once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from baremetal_provision import markers
from baremetal_provision.backends.base import SystemFacts
from capfleet.api.baremetal import BaremetalInstanceSpec

Phase = Literal[
    "PoweringOff",
    "NetworkBooting",
    "Installing",
    "Provisioned",
    "Retrying",
    "Failed",
    "Cleaning",
    "Deprovisioning",
]
Action = Literal[
    "power_off",
    "network_boot",
    "boot_from_disk",
    "power_on",
    "first_boot",
    "shut_down",
    "fail_attempt",
    "expire",
    "wait",
    "done",
]


@dataclass(frozen=True)
class Goal:
    """What the spec asks of provisioning."""

    timeout_seconds: int
    online: bool = True
    max_attempts: int = 1
    deploys_image: bool = False
    """The deploy ramdisk writes an image and powers off: the server is power-cycled onto its disk."""

    @classmethod
    def of(cls, spec: BaremetalInstanceSpec) -> Goal:
        return cls(
            timeout_seconds=spec.provisioning_timeout_seconds,
            online=spec.online,
            max_attempts=spec.max_provisioning_attempts,
            deploys_image=spec.image is not None,
        )


@dataclass(frozen=True)
class Marks:
    """The durable marks of one instance (annotations)."""

    network_booted_at: datetime | None
    seed_fetched: bool
    called_back: bool
    cleaning_booted_at: datetime | None = None
    cleaned: bool = False
    failure_reported: str | None = None
    """What the deploy ramdisk reported of this attempt's failure ("Reason: message")."""
    failed_attempts: int = 0
    last_failure: str | None = None
    disk_booted: bool = False

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> Marks:
        found = markers.annotations_of(meta)
        return cls(
            network_booted_at=markers.parse_time(found.get(markers.NETWORK_BOOTED)),
            seed_fetched=bool(found.get(markers.SEED_FETCHED)),
            called_back=bool(found.get(markers.CALLED_BACK)),
            cleaning_booted_at=markers.parse_time(found.get(markers.CLEANING_BOOTED)),
            cleaned=bool(found.get(markers.CLEANED)),
            failure_reported=found.get(markers.FAILURE_REPORTED) or None,
            failed_attempts=markers.count(found.get(markers.FAILED_ATTEMPTS)),
            last_failure=found.get(markers.LAST_FAILURE) or None,
            disk_booted=bool(found.get(markers.DISK_BOOTED)),
        )

    def attempts(self, goal: Goal) -> int:
        """Attempts made so far: the failed ones and the one running, if any."""
        running = self.network_booted_at is not None and self.failed_attempts < goal.max_attempts
        return self.failed_attempts + (1 if running else 0)

    def deadline(self, timeout_seconds: int) -> datetime | None:
        if self.network_booted_at is None:
            return None
        return self.network_booted_at + timedelta(seconds=timeout_seconds)


@dataclass(frozen=True)
class Decision:
    phase: Phase
    action: Action


def decide(
    facts: SystemFacts, marks: Marks, goal: Goal, *, now: datetime, disk_requested: bool = False
) -> Decision:
    """The phase the instance is in and the one action that moves it on.

    Once provisioned, the boot device is put back on disk (a "Once" override may stick on real BMCs, so
    it is made persistent) and the power follows `online`. `disk_requested` says the persistent disk
    boot was already requested in this pass and is taken as done: some BMCs report the new device only
    after the next cold start (virtualbmc) or never report an override as persistent, so asking again
    would loop. The next pass (the next reconcile) checks again.
    """
    if marks.failed_attempts >= goal.max_attempts:
        return _stopped(facts)
    if marks.called_back:
        if goal.deploys_image and not marks.disk_booted:
            return _first_boot(facts, disk_requested)
        return _provisioned(facts, goal.online, disk_requested)
    deadline = marks.deadline(goal.timeout_seconds)
    if deadline is None:
        if facts.power_state != "Off":
            return Decision("PoweringOff", "power_off")
        return Decision("NetworkBooting", "network_boot")
    if marks.failure_reported is not None or now >= deadline:
        return Decision("Retrying", "fail_attempt")
    return Decision("Installing" if marks.seed_fetched else "NetworkBooting", "wait")


def _stopped(facts: SystemFacts) -> Decision:
    if facts.power_state != "Off" or facts.boot_device == "pxe":
        return Decision("Failed", "expire")
    return Decision("Failed", "done")


def _first_boot(facts: SystemFacts, disk_requested: bool) -> Decision:
    """The image is written: power off (the ramdisk may still be finishing), disk, power on, once."""
    if facts.power_state != "Off":
        return Decision("Provisioned", "power_off")
    if not disk_requested and facts.boot_device != "disk":
        return Decision("Provisioned", "boot_from_disk")
    return Decision("Provisioned", "first_boot")


def _provisioned(facts: SystemFacts, online: bool, disk_requested: bool) -> Decision:
    if not disk_requested and (facts.boot_device != "disk" or facts.boot_override == "Once"):
        return Decision("Provisioned", "boot_from_disk")
    if online and facts.power_state == "Off":
        return Decision("Provisioned", "power_on")
    if not online and facts.power_state == "On":
        return Decision("Provisioned", "shut_down")
    return Decision("Provisioned", "done")


def failure(marks: Marks, timeout_seconds: int) -> str:
    """Why the current attempt failed: the ramdisk's report, else the deadline."""
    return marks.failure_reported or f"ProvisioningTimedOut: no callback within {timeout_seconds}s"


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
