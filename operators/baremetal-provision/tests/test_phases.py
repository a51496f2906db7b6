"""Phase decisions from the BMC's facts and the durable marks (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from baremetal_provision import markers, phases
from baremetal_provision.backends.base import SystemFacts
from capfleet.api.baremetal import BaremetalInstanceSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ON_PXE = SystemFacts("On", "pxe", "Continuous")
OFF_DISK = SystemFacts("Off", "disk", "Continuous")
GOAL = phases.Goal(timeout_seconds=60)


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
        (ON_PXE, marks(timedelta(seconds=100)), phases.Decision("Retrying", "fail_attempt")),
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
    assert phases.decide(facts, given, GOAL, now=NOW) == expected


def test_a_restart_after_the_power_cycle_does_not_power_cycle_again() -> None:
    meta = {"name": "bm", "annotations": {markers.NETWORK_BOOTED: "2025-12-31T23:59:30Z"}}
    decision = phases.decide(ON_PXE, phases.Marks.of(meta), GOAL, now=NOW)
    assert decision.action == "wait"


def test_remaining_time() -> None:
    assert phases.remaining(marks(), timeout_seconds=60, now=NOW) is None
    assert phases.remaining(marks(timedelta(seconds=10)), timeout_seconds=60, now=NOW) == 50
    assert phases.remaining(marks(timedelta(seconds=10), back=True), timeout_seconds=60, now=NOW) is None


ON_DISK = SystemFacts("On", "disk", "Continuous")
OFF_DISK_ONCE = SystemFacts("Off", "disk", "Once")


@pytest.mark.parametrize(
    ("facts", "online", "disk_requested", "expected"),
    [
        (ON_DISK, True, False, phases.Decision("Provisioned", "done")),
        (OFF_DISK, True, False, phases.Decision("Provisioned", "power_on")),
        (ON_DISK, False, False, phases.Decision("Provisioned", "shut_down")),
        (OFF_DISK, False, False, phases.Decision("Provisioned", "done")),
        (SystemFacts("Unknown", "disk", "Continuous"), False, False, phases.Decision("Provisioned", "done")),
        # A BMC that never reports a persistent override: asked once per pass, then accepted.
        (OFF_DISK_ONCE, False, False, phases.Decision("Provisioned", "boot_from_disk")),
        (OFF_DISK_ONCE, False, True, phases.Decision("Provisioned", "done")),
        (OFF_DISK_ONCE, True, True, phases.Decision("Provisioned", "power_on")),
        # ... or that applies a boot device only at the next cold start (virtualbmc).
        (SystemFacts("On", "pxe", "Continuous"), True, True, phases.Decision("Provisioned", "done")),
        (
            SystemFacts("On", "pxe", "Continuous"),
            True,
            False,
            phases.Decision("Provisioned", "boot_from_disk"),
        ),
    ],
)
def test_provisioned_power_follows_online(
    facts: SystemFacts, online: bool, disk_requested: bool, expected: phases.Decision
) -> None:
    goal = phases.Goal(timeout_seconds=60, online=online)
    decision = phases.decide(facts, marks(back=True), goal, now=NOW, disk_requested=disk_requested)
    assert decision == expected


THREE_TRIES = phases.Goal(timeout_seconds=60, max_attempts=3)


def attempt(failed: int, reported: str | None = None, booted: int | None = 10) -> phases.Marks:
    at = NOW - timedelta(seconds=booted) if booted is not None else None
    return phases.Marks(at, False, False, failure_reported=reported, failed_attempts=failed)


@pytest.mark.parametrize(
    ("facts", "given", "expected"),
    [
        # The ramdisk reported a failure, or the deadline passed: this attempt is counted, the server off.
        (
            ON_PXE,
            attempt(0, "BadChecksum: the image is not the one"),
            phases.Decision("Retrying", "fail_attempt"),
        ),
        (ON_PXE, attempt(1, booted=61), phases.Decision("Retrying", "fail_attempt")),
        # After a counted failure the marks are cleared: the next attempt network-boots again.
        (OFF_DISK, attempt(2, booted=None), phases.Decision("NetworkBooting", "network_boot")),
        (ON_PXE, attempt(2, booted=None), phases.Decision("PoweringOff", "power_off")),
        # Every attempt failed: off and on disk, then nothing more; never another network boot.
        (ON_PXE, attempt(3, booted=None), phases.Decision("Failed", "expire")),
        (OFF_DISK, attempt(3, booted=None), phases.Decision("Failed", "done")),
        (OFF_DISK, attempt(3, "DownloadFailed: 404"), phases.Decision("Failed", "done")),
    ],
)
def test_failed_attempts_are_retried_up_to_the_limit(
    facts: SystemFacts, given: phases.Marks, expected: phases.Decision
) -> None:
    assert phases.decide(facts, given, THREE_TRIES, now=NOW) == expected


def test_the_attempts_count_the_running_one_until_the_limit() -> None:
    assert attempt(0, booted=None).attempts(THREE_TRIES) == 0
    assert attempt(0).attempts(THREE_TRIES) == 1
    assert attempt(2).attempts(THREE_TRIES) == 3
    assert attempt(3, booted=None).attempts(THREE_TRIES) == 3


def test_the_failure_is_the_ramdisks_report_or_the_deadline() -> None:
    assert phases.failure(attempt(0, "NoMatchingDisk: no disk has serial X"), 60).startswith(
        "NoMatchingDisk:"
    )
    assert phases.failure(attempt(0), 60) == "ProvisioningTimedOut: no callback within 60s"


IMAGE = phases.Goal(timeout_seconds=60, deploys_image=True)
DEPLOYED = phases.Marks(NOW, True, True)
FIRST_BOOTED = phases.Marks(NOW, True, True, disk_booted=True)


@pytest.mark.parametrize(
    ("facts", "given", "disk_requested", "expected"),
    [
        # The ramdisk called back, and may still be syncing or powering off: power off first.
        (ON_PXE, DEPLOYED, False, phases.Decision("Provisioned", "power_off")),
        (
            SystemFacts("Off", "pxe", "Continuous"),
            DEPLOYED,
            False,
            phases.Decision("Provisioned", "boot_from_disk"),
        ),
        (
            SystemFacts("Off", "pxe", "Continuous"),
            DEPLOYED,
            True,
            phases.Decision("Provisioned", "first_boot"),
        ),
        (OFF_DISK, DEPLOYED, False, phases.Decision("Provisioned", "first_boot")),
        # Once booted from disk it is an ordinary provisioned server: a reboot is not another power cycle.
        (
            SystemFacts("On", "disk", "Continuous"),
            FIRST_BOOTED,
            False,
            phases.Decision("Provisioned", "done"),
        ),
    ],
)
def test_a_deployed_image_is_power_cycled_onto_the_disk_once(
    facts: SystemFacts, given: phases.Marks, disk_requested: bool, expected: phases.Decision
) -> None:
    assert phases.decide(facts, given, IMAGE, now=NOW, disk_requested=disk_requested) == expected


def cleaning(booted: timedelta | None = None, cleaned: bool = False) -> phases.Marks:
    return phases.Marks(None, True, True, NOW - booted if booted is not None else None, cleaned)


@pytest.mark.parametrize(
    ("facts", "given", "clean", "expected"),
    [
        (ON_DISK, cleaning(), True, phases.Decision("Cleaning", "power_off")),
        (OFF_DISK, cleaning(), True, phases.Decision("Cleaning", "network_boot")),
        (ON_PXE, cleaning(timedelta(seconds=10)), True, phases.Decision("Cleaning", "wait")),
        (
            ON_PXE,
            cleaning(timedelta(seconds=10), cleaned=True),
            True,
            phases.Decision("Deprovisioning", "shut_down"),
        ),
        (
            OFF_DISK,
            cleaning(timedelta(seconds=10), cleaned=True),
            True,
            phases.Decision("Deprovisioning", "done"),
        ),
        (
            SystemFacts("Off", "pxe", "Continuous"),
            cleaning(timedelta(seconds=10), cleaned=True),
            True,
            phases.Decision("Deprovisioning", "boot_from_disk"),
        ),
        # The cleaner never called back: deprovisioning goes on without it.
        (ON_PXE, cleaning(timedelta(seconds=100)), True, phases.Decision("Deprovisioning", "shut_down")),
        # cleaning: disabled (or a clusterctl move) skips it.
        (ON_DISK, cleaning(), False, phases.Decision("Deprovisioning", "shut_down")),
        (OFF_DISK, cleaning(), False, phases.Decision("Deprovisioning", "done")),
    ],
)
def test_decide_deprovision(
    facts: SystemFacts, given: phases.Marks, clean: bool, expected: phases.Decision
) -> None:
    assert phases.decide_deprovision(facts, given, clean=clean, timeout_seconds=60, now=NOW) == expected


def test_cleaning_expires_only_after_the_cleaner_was_booted() -> None:
    assert not phases.cleaning_expired(cleaning(), timeout_seconds=60, now=NOW)
    assert not phases.cleaning_expired(cleaning(timedelta(seconds=10)), timeout_seconds=60, now=NOW)
    assert phases.cleaning_expired(cleaning(timedelta(seconds=60)), timeout_seconds=60, now=NOW)
    assert not phases.cleaning_expired(cleaning(timedelta(seconds=60), True), timeout_seconds=60, now=NOW)


def test_marks_are_read_from_annotations() -> None:
    meta = {
        "name": "bm",
        "annotations": {
            markers.CLEANING_BOOTED: "2025-12-31T23:59:30Z",
            markers.CLEANED: "2026-01-01T00:00:00Z",
        },
    }
    found = phases.Marks.of(meta)
    assert found.cleaning_booted_at == NOW - timedelta(seconds=30)
    assert found.cleaned
    assert not found.called_back
    assert (found.failed_attempts, found.failure_reported, found.disk_booted) == (0, None, False)


def test_attempt_marks_are_read_from_annotations() -> None:
    meta = {
        "name": "bm",
        "annotations": {
            markers.FAILED_ATTEMPTS: "2",
            markers.FAILURE_REPORTED: "BadChecksum: x",
            markers.LAST_FAILURE: "DownloadFailed: y",
            markers.DISK_BOOTED: "2026-01-01T00:00:00Z",
        },
    }
    found = phases.Marks.of(meta)
    assert (found.failed_attempts, found.failure_reported, found.last_failure) == (
        2,
        "BadChecksum: x",
        "DownloadFailed: y",
    )
    assert found.disk_booted
    # An edited counter that is not a count restarts it rather than failing every reconcile.
    assert (
        phases.Marks.of({"name": "bm", "annotations": {markers.FAILED_ATTEMPTS: "many"}}).failed_attempts == 0
    )


GUEST_MARKS = (
    markers.BOOT_REQUESTER,
    markers.SEED_FETCHED,
    markers.CALLBACK_KEY_FETCHED,
    markers.CALLED_BACK,
    markers.FAILURE_REPORTED,
    markers.CLEANING_KEY_FETCHED,
    markers.CLEANED,
)


CLEANED_ON_DELETION = BaremetalInstanceSpec.model_validate(
    {
        "bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bmc"}},
        "bootMACAddress": "52:54:00:aa:bb:01",
        "os": {"kernelURL": "http://h/k", "initrdURL": "http://h/i"},
        "userDataSecretRef": {"name": "bootstrap"},
        "cleaning": "metadata",
    }
)


def decided_from(annotations: dict[str, str]) -> tuple[object, ...]:
    """Everything the reconcile and the deletion decide on among an instance's marks."""
    meta = {"name": "bm", "annotations": annotations}
    deleted = {**meta, "deletionTimestamp": "2026-01-01T00:00:00Z"}
    return (
        phases.Marks.of(meta),
        markers.touched(meta),
        markers.cleaning_pending(deleted, CLEANED_ON_DELETION),
    )


@pytest.mark.parametrize("mark", GUEST_MARKS)
def test_a_guest_mark_wakes_the_reconcile_exactly_when_a_decision_reads_it(mark: str) -> None:
    """The guest's marks left out of what kopf compares (they wake no reconcile) must be marks no decision
    reads; every other one must change what the reconcile sees."""
    before = {markers.NETWORK_BOOTED: "2026-01-01T00:00:00Z"}
    read = decided_from({**before, mark: "Reason: message"}) != decided_from(before)
    assert read != (mark in markers.QUIET_MARKS)
