"""Placement: selector, failure domain, capacity with reservations, anti-affinity spreading."""

from __future__ import annotations

from libvirt_vm import placing

A = placing.Candidate("a", {"zone": "x"}, "fd-a", True, vcpus=2, memory_mib=4096, storage_gib=10)
B = placing.Candidate("b", {"zone": "x"}, "fd-b", True, vcpus=1, memory_mib=8192, storage_gib=10)


def request(key: str | None = "k", **labels: str) -> placing.Request:
    return placing.Request(placing.Demand(1, 512, 1, key), labels, None)


def test_anti_affine_vms_spread_then_fill_what_has_room() -> None:
    placed: list[tuple[str, placing.Demand]] = []
    chosen = []
    for _ in range(3):
        decision = placing.place(request(), [A, B], placed)
        assert decision.hypervisor is not None
        chosen.append(decision.hypervisor)
        placed.append((decision.hypervisor, request().demand))
    assert chosen[:2] in (["a", "b"], ["b", "a"])
    assert chosen[2] == "a"  # b has one vCPU, already taken
    full = placing.place(request(), [A, B], placed)
    assert (full.hypervisor, full.reason) == (None, "InsufficientCapacity")


def test_without_a_key_the_most_free_memory_wins() -> None:
    assert placing.place(request(None), [A, B], []).hypervisor == "b"


def test_selector_failure_domain_and_readiness_filter() -> None:
    assert placing.place(request(zone="y"), [A, B], []).reason == "NoHypervisorMatches"
    in_a = placing.Request(request().demand, {}, "fd-a")
    assert placing.place(in_a, [A, B], []).hypervisor == "a"
    not_ready = placing.Candidate("c", {}, None, False, 8, 8192, 10)
    assert placing.place(request(), [not_ready], []).reason == "NoHypervisorMatches"


def test_storage_counts() -> None:
    big = placing.Request(placing.Demand(1, 512, 11), {}, None)
    assert placing.place(big, [A, B], []).reason == "InsufficientCapacity"
