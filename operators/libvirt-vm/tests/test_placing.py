"""Placement: selector, failure domain, base images offered, capacity with reservations, anti-affinity."""

from __future__ import annotations

import dataclasses

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


def test_a_vm_goes_only_where_every_base_image_it_clones_is_offered() -> None:
    node = dataclasses.replace(A, base_images=("capfleet-node-*.qcow2",))
    both = dataclasses.replace(B, base_images=("capfleet-node-*.qcow2", "debian-12"))
    clones = placing.Request(placing.Demand(1, 512, 1), {}, None, frozenset({"capfleet-node-v1.qcow2"}))
    assert placing.place(clones, [node, both], []).hypervisor == "b"  # most free memory among both
    debian = dataclasses.replace(clones, images=frozenset({"capfleet-node-v1.qcow2", "debian-12"}))
    assert placing.place(debian, [node, both], []).hypervisor == "b"
    assert placing.place(debian, [node], []).reason == placing.BASE_IMAGE_NOT_OFFERED
    assert "debian-12" in placing.place(debian, [node], []).message
    assert placing.place(clones, [A, B], []).reason == placing.BASE_IMAGE_NOT_OFFERED  # nothing listed


def test_no_pattern_offers_a_vms_own_volume() -> None:
    """Every capfleet VM's volumes are `<namespace>_<name>_...`: a pattern as wide as `*` still never lets
    one VM clone another's disk or seed."""
    assert placing.offers(("*",), "capfleet-node-v1.qcow2")
    assert not placing.offers(("*",), "tenant-b_db_root.qcow2")
    assert not placing.offers(("*",), "tenant-b_db_cidata.iso")
    assert placing.not_offered(("*.qcow2",), ["a.qcow2", "b.raw", "x_y.qcow2"]) == ["b.raw", "x_y.qcow2"]
    assert not placing.offers((), "a.qcow2")


def test_a_vm_goes_only_where_its_interfaces_are_offered_to_its_namespace() -> None:
    nodes = placing.Attachment("bridge", "br-nodes")
    prov = placing.Attachment("bridge", "br-prov", frozenset({"ops"}))
    hv = dataclasses.replace(A, networks=(nodes, prov, placing.Attachment("network", "lab-*")))
    wants = frozenset({placing.attachment("br-nodes", None, False)})
    tenant = placing.Request(placing.Demand(1, 512, 1), {}, None, attachments=wants, namespace="team-a")
    assert placing.place(tenant, [hv], []).hypervisor == "a"
    onto_prov = dataclasses.replace(
        tenant, attachments=frozenset({placing.attachment("br-prov", None, False)})
    )
    refused = placing.place(onto_prov, [hv], [])
    assert (refused.hypervisor, refused.reason) == (None, placing.NETWORK_NOT_OFFERED)
    assert "bridge br-prov" in refused.message
    assert placing.place(dataclasses.replace(onto_prov, namespace="ops"), [hv], []).hypervisor == "a"
    lab = dataclasses.replace(tenant, attachments=frozenset({placing.attachment(None, "lab-7", False)}))
    assert placing.place(lab, [hv], []).hypervisor == "a"  # a pattern
    user = dataclasses.replace(tenant, attachments=frozenset({placing.attachment(None, None, True)}))
    assert placing.not_attachable(hv.networks, user.attachments, "team-a") == ["userMode"]
    assert placing.place(tenant, [A], []).reason == placing.NETWORK_NOT_OFFERED  # nothing offered
