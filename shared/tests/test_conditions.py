"""Condition lists: transition times move only on status changes; Ready explains the first stuck step."""

from capfleet import conditions
from capfleet.conditions import Update


def test_apply_appends_new_condition_with_generation() -> None:
    result = conditions.apply(
        [], Update.true("Scheduled", "Placed"), generation=3, now="2026-01-01T00:00:00Z"
    )
    assert [(c.type, c.status, c.reason, c.observed_generation) for c in result] == [
        ("Scheduled", "True", "Placed", 3)
    ]
    assert result[0].last_transition_time == "2026-01-01T00:00:00Z"


def test_same_status_keeps_transition_time_but_updates_reason_and_message() -> None:
    first = conditions.apply(
        [], Update.false("Ready", "Waiting", "a"), generation=1, now="2026-01-01T00:00:00Z"
    )
    second = conditions.apply(
        first, Update.false("Ready", "Exhausted", "b"), generation=2, now="2026-02-02T00:00:00Z"
    )
    assert second[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert (second[0].reason, second[0].message, second[0].observed_generation) == ("Exhausted", "b", 2)


def test_status_change_moves_transition_time() -> None:
    first = conditions.apply([], Update.false("Ready", "Waiting"), generation=1, now="2026-01-01T00:00:00Z")
    second = conditions.apply(first, Update.true("Ready", "Ready"), generation=1, now="2026-02-02T00:00:00Z")
    assert second[0].last_transition_time == "2026-02-02T00:00:00Z"


def test_reapplying_the_same_update_is_a_fixed_point() -> None:
    update = Update.true("Ready", "Ready")
    once = conditions.apply([], update, generation=1)
    assert conditions.apply(once, update, generation=1) == once


def test_wire_round_trip() -> None:
    result = conditions.apply(
        [], Update.true("Ready", "Ready", "ok"), generation=7, now="2026-01-01T00:00:00Z"
    )
    wire = conditions.to_wire(result)
    assert wire == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 7,
        }
    ]
    assert conditions.parse(wire) == result


def test_summarize_names_the_first_step_that_is_not_true() -> None:
    conds = conditions.apply_all(
        [],
        [
            Update.true("Scheduled", "Placed"),
            Update.false("DisksReady", "ImageMissing", "no volume base.qcow2"),
            Update.false("Running", "NotStarted"),
        ],
        generation=1,
    )
    ready = conditions.summarize(conds, ["Scheduled", "DisksReady", "Running"])
    assert ready == Update.false("Ready", "ImageMissing", "DisksReady: no volume base.qcow2")


def test_summarize_treats_missing_step_as_unknown_and_all_true_as_ready() -> None:
    conds = conditions.apply([], Update.true("Scheduled", "Placed"), generation=1)
    assert conditions.summarize(conds, ["Scheduled", "Running"]).status == "Unknown"
    assert conditions.summarize(conds, ["Scheduled"]) == Update.true("Ready", "Ready")


def test_step_durations_measure_each_true_step_from_the_one_before() -> None:
    steps = ["A", "B", "C", "D"]
    found = conditions.apply_all(
        [],
        [Update.true("A", "Done"), Update.true("B", "Done")],
        generation=1,
        now="2026-01-01T00:00:05Z",
    )
    found = conditions.apply(found, Update.true("C", "Done"), generation=1, now="2026-01-01T00:01:00Z")
    found = conditions.apply(found, Update.false("D", "Waiting"), generation=1, now="2026-01-01T00:02:00Z")
    durations = conditions.step_durations(found, steps, "2026-01-01T00:00:00Z")
    assert durations == {"A": 5, "B": 0, "C": 55}


def test_step_durations_skip_a_step_that_is_not_true_and_measure_the_next_from_the_last_done() -> None:
    found = conditions.apply([], Update.true("A", "Done"), generation=1, now="2026-01-01T00:00:10Z")
    found = conditions.apply(found, Update.unknown("B", "Pending"), generation=1, now="2026-01-01T00:00:20Z")
    found = conditions.apply(found, Update.true("C", "Done"), generation=1, now="2026-01-01T00:00:30Z")
    assert conditions.step_durations(found, ["A", "B", "C"], "2026-01-01T00:00:00Z") == {"A": 10, "C": 20}
