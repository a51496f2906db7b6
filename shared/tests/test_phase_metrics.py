"""What the dashboard's "machines by phase" and "step durations" panels are computed from: the phase an
object is counted under, the counts kept equal to the objects, and the steps a status write just finished."""

from __future__ import annotations

from typing import Any

import prometheus_client

from capfleet import conditions, metrics, statuses

CREATED = "2026-11-26T10:00:00Z"


def condition(type_: str, status: str, reason: str = "Done", at: str = CREATED) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": at}


def test_the_phase_is_status_phase_else_ready_or_the_reason_it_is_not() -> None:
    assert statuses.phase_of({"status": {"phase": "Deploying", "conditions": []}}) == "Deploying"
    assert statuses.phase_of({"status": {"conditions": [condition("Ready", "True", "Ready")]}}) == "Ready"
    waiting = {"status": {"conditions": [condition("Ready", "False", "QuotaExceeded")]}}
    assert statuses.phase_of(waiting) == "QuotaExceeded"
    assert statuses.phase_of({"metadata": {"name": "new"}}) == "Pending"
    assert statuses.phase_of({"status": {"conditions": [condition("Scheduled", "True")]}}) == "Pending"


def test_counts_follow_each_object_from_phase_to_phase_until_it_is_gone() -> None:
    gauge = prometheus_client.Gauge(
        "objects", "test", ["kind", "phase"], registry=prometheus_client.CollectorRegistry()
    )
    counts = metrics.PhaseCounts(gauge)

    def value(phase: str) -> float:
        return float(gauge.labels("LibvirtVM", phase)._value.get())

    counts.observe("a", "LibvirtVM", "WaitingForScheduled")
    counts.observe("b", "LibvirtVM", "WaitingForScheduled")
    counts.observe("a", "LibvirtVM", "WaitingForScheduled")  # a repeated event counts once
    assert value("WaitingForScheduled") == 2
    counts.observe("a", "LibvirtVM", "Ready")
    assert (value("WaitingForScheduled"), value("Ready")) == (1, 1)
    counts.forget("a")
    counts.forget("a")  # a second DELETED event (a relist) uncounts nothing more
    counts.forget("never-seen")
    assert (value("WaitingForScheduled"), value("Ready")) == (1, 0)


def test_a_step_is_timed_once_when_it_becomes_true_from_the_step_before_it() -> None:
    steps = ["Scheduled", "DomainDefined", "Running"]
    before = conditions.parse(
        [condition("Scheduled", "True", at="2026-11-26T10:00:04Z"), condition("DomainDefined", "False")]
    )
    after = conditions.parse(
        [
            condition("Scheduled", "True", at="2026-11-26T10:00:04Z"),
            condition("DomainDefined", "True", at="2026-11-26T10:00:34Z"),
            condition("Running", "Unknown"),
        ]
    )
    assert statuses.steps_done(before, after, steps, CREATED) == {"DomainDefined": 30}
    assert statuses.steps_done([], after, steps, CREATED) == {"Scheduled": 4, "DomainDefined": 30}
    assert statuses.steps_done(after, after, steps, CREATED) == {}
