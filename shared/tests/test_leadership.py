"""Leader election's decisions, without a cluster: when a replica may take the Lease, and what it writes.

The hand-over itself, between two operator processes on a real API server, is proven in
e2e/tests/test_runtime_sample_operator.py.
"""

from datetime import UTC, datetime

import pytest

from capfleet import leadership
from capfleet.leadership import Observation, Timings, claim, may_take, observe
from capfleet.options import parse_options


def lease(holder: str | None, renewed: str | None, transitions: int = 0) -> dict[str, object]:
    return {
        "metadata": {"name": "capfleet-x", "resourceVersion": "42"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseTransitions": transitions},
    }


def test_a_standby_waits_a_whole_duration_of_its_own_clock_after_the_last_renewal_it_saw() -> None:
    seen = observe(lease("a", "t1"), None, now=100.0)
    assert not may_take(seen, "b", now=114.9, duration=15)
    # A renewal restarts the standby's clock, whatever time the holder wrote into it.
    renewed = observe(lease("a", "t2"), seen, now=110.0)
    assert renewed.seen_at == 110.0
    assert not may_take(renewed, "b", now=120.0, duration=15)
    assert may_take(renewed, "b", now=125.0, duration=15)
    # Reading the same record again does not.
    assert observe(lease("a", "t2"), renewed, now=124.0) is renewed


def test_a_free_lease_or_ones_own_can_be_taken_at_once() -> None:
    assert may_take(Observation(None, None, 100.0), "b", now=100.0, duration=15)
    assert may_take(observe(lease("", "t1"), None, 100.0), "b", now=100.0, duration=15)
    assert may_take(Observation("b", "t1", 100.0), "b", now=100.0, duration=15)


def test_taking_over_counts_a_transition_and_renewing_does_not() -> None:
    moment = datetime(2026, 11, 25, 19, 0, 0, 123456, tzinfo=UTC)
    taken = claim(lease("a", "t1", transitions=3), "b", Timings(), moment)
    assert taken["metadata"] == {"resourceVersion": "42"}  # valid only against the version read
    assert taken["spec"] == {
        "holderIdentity": "b",
        "leaseDurationSeconds": 15,
        "renewTime": "2026-11-25T19:00:00.123456Z",
        "acquireTime": "2026-11-25T19:00:00.123456Z",
        "leaseTransitions": 4,
    }
    renewed = claim(lease("b", "t1", transitions=4), "b", Timings(), moment)
    assert "acquireTime" not in renewed["spec"]
    assert "leaseTransitions" not in renewed["spec"]
    freed = claim(lease(None, None, transitions=4), "b", Timings(), moment)
    assert freed["spec"]["leaseTransitions"] == 4


def test_timings_must_leave_the_holder_time_to_stop_before_a_standby_takes_over() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        Timings(duration=10, renew_deadline=10, retry_period=2)
    assert leadership.holder_identity() != leadership.holder_identity()


def test_leader_election_runs_kopf_without_its_peering() -> None:
    elected = parse_options(["--leader-elect"], {"POD_NAMESPACE": "capfleet-system"})
    assert elected.leader_elect
    assert elected.leader_election_namespace == "capfleet-system"
    assert not elected.peering
    assert parse_options([], {}).peering
    assert not parse_options([], {"CAPFLEET_LEADER_ELECT": "true"}).peering
