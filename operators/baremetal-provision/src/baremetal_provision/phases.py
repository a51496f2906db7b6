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
from baremetal_provision.backends.bmc import SystemFacts

Phase = Literal["PoweringOff", "NetworkBooting", "Installing", "Provisioned", "Failed"]
Action = Literal["power_off", "network_boot", "boot_from_disk", "expire", "wait", "done"]


@dataclass(frozen=True)
class Marks:
    """The durable marks of one instance (annotations)."""

    network_booted_at: datetime | None
    seed_fetched: bool
    called_back: bool

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> Marks:
        found = markers.annotations_of(meta)
        return cls(
            network_booted_at=markers.parse_time(found.get(markers.NETWORK_BOOTED)),
            seed_fetched=bool(found.get(markers.SEED_FETCHED)),
            called_back=bool(found.get(markers.CALLED_BACK)),
        )

    def deadline(self, timeout_seconds: int) -> datetime | None:
        if self.network_booted_at is None:
            return None
        return self.network_booted_at + timedelta(seconds=timeout_seconds)


@dataclass(frozen=True)
class Decision:
    phase: Phase
    action: Action


def decide(facts: SystemFacts, marks: Marks, *, timeout_seconds: int, now: datetime) -> Decision:
    """The phase the instance is in and the one action that moves it on."""
    if marks.called_back:
        if facts.boot_device != "disk" or facts.boot_override == "Once":
            return Decision("Provisioned", "boot_from_disk")  # a "Once" override may stick
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
