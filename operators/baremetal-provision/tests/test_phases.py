"""Phase decisions from the BMC's facts and the durable marks (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from baremetal_provision import markers, phases
from baremetal_provision.backends.bmc import SystemFacts

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ON_PXE = SystemFacts("On", "pxe", "Continuous")
OFF_DISK = SystemFacts("Off", "disk", "Continuous")


def marks(booted: timedelta | None = None, seed: bool = False, back: bool = False) -> phases.Marks:
    return phases.Marks(NOW - booted if booted is not None else None, seed, back)


@pytest.mark.parametrize(
    ("facts", "given", "expected"),
    [
        (ON_PXE, marks(), phases.Decision("PoweringOff", "power_off")),
        (OFF_DISK, marks(), phases.Decision("NetworkBooting", "network_boot")),
        (ON_PXE, marks(timedelta(seconds=10)), phases.Decision("NetworkBooting", "wait")),
        (OFF_DISK, marks(timedelta(seconds=10)), phases.Decision("NetworkBooting", "wait")),
        (ON_PXE, marks(timedelta(seconds=10), seed=True), phases.Decision("Installing", "wait")),
        (ON_PXE, marks(timedelta(seconds=100)), phases.Decision("Failed", "expire")),
        (OFF_DISK, marks(timedelta(seconds=100)), phases.Decision("Failed", "done")),
        (ON_PXE, marks(timedelta(seconds=100), back=True), phases.Decision("Provisioned", "boot_from_disk")),
        (
            SystemFacts("On", "disk", "Once"),
            marks(back=True),
            phases.Decision("Provisioned", "boot_from_disk"),
        ),
        (SystemFacts("On", "disk", "Continuous"), marks(back=True), phases.Decision("Provisioned", "done")),
    ],
)
def test_decide(facts: SystemFacts, given: phases.Marks, expected: phases.Decision) -> None:
    assert phases.decide(facts, given, timeout_seconds=60, now=NOW) == expected


def test_a_restart_after_the_power_cycle_does_not_power_cycle_again() -> None:
    meta = {"name": "bm", "annotations": {markers.NETWORK_BOOTED: "2025-12-31T23:59:30Z"}}
    decision = phases.decide(ON_PXE, phases.Marks.of(meta), timeout_seconds=60, now=NOW)
    assert decision.action == "wait"


def test_remaining_time() -> None:
    assert phases.remaining(marks(), timeout_seconds=60, now=NOW) is None
    assert phases.remaining(marks(timedelta(seconds=10)), timeout_seconds=60, now=NOW) == 50
    assert phases.remaining(marks(timedelta(seconds=10), back=True), timeout_seconds=60, now=NOW) is None
